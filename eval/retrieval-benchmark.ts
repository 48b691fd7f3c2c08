/**
 * Builds the instance-retrieval benchmark, deterministically from a seed:
 * - catalogue: every Tux Paint photo cut-out (except flags/coins/symbols and mirrored duplicates), trimmed
 *   and centred on a white square, like a shop packshot;
 * - queries: one per catalogue item, the same cut-out pasted into a new picture with an exact box:
 *   "scene" (70 %) on a crop of a photographic wallpaper, 25–60 % of the short side; "flat" (30 %) on a light
 *   plain background, 45–70 %; both rotated ±20°, colour-jittered, sometimes blurred or mirrored, JPEG q40–90.
 * Output goes to .cache/eval-data/retrieval-v1-seed<seed>/ and is reused while its benchmark.json exists.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import sharp, { type CreateRaw, type Sharp } from 'sharp';
import type { Box } from '#lib/vision/image-input.ts';
import { EVAL_DATA_DIR, EVAL_ROOT } from './fetch-data.ts';
import { cocoLabelOfStamp } from './stamp-labels.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';

export interface CatalogueItem {
  id: number;
  /** Stamp path under the Tux Paint stamps directory. */
  stamp: string;
  file: string;
  /** COCO class of the object when it has one (for the detector score on composites). */
  coco?: string;
}

export interface Query {
  id: number;
  item: number;
  kind: 'scene' | 'flat';
  file: string;
  box: Box;
  mirrored: boolean;
}

export interface RetrievalBenchmark {
  directory: string;
  items: CatalogueItem[];
  queries: Query[];
}

const STAMPS_DIR = 'usr/share/tuxpaint/stamps';
const WALLPAPERS_DIR = 'usr/share/wallpapers';
const SCENE_SIZE = { width: 640, height: 480 };
const FLAT_SIZE = 480;

/** The benchmark's generator (re-exported: eval scripts import it from here). */
export { seededRandom };

function listFiles(directory: string, accept: (path: string) => boolean): string[] {
  return readdirSync(directory, { withFileTypes: true })
    .flatMap((entry) => {
      const path = join(directory, entry.name);
      return entry.isDirectory() ? listFiles(path, accept) : accept(path) ? [path] : [];
    })
    .sort();
}

function stampFiles(): string[] {
  const root = join(EVAL_ROOT, STAMPS_DIR);
  return listFiles(root, (path) => path.endsWith('.png') && !path.endsWith('_mirror.png')).filter(
    (path) => !relative(root, path).startsWith('symbols/'),
  );
}

/** One photographic wallpaper per theme: its smallest rendition that is at least 1280 px wide. */
function backgroundFiles(): string[] {
  const root = join(EVAL_ROOT, WALLPAPERS_DIR);
  return readdirSync(root)
    .sort()
    .flatMap((theme) => {
      const images = join(root, theme, 'contents/images');
      if (!existsSync(images)) return [];
      const candidates = readdirSync(images)
        .filter((name) => /^\d+x\d+\.(jpg|png)$/.test(name))
        .map((name) => ({ name, width: Number(name.split('x')[0]) }))
        .filter(({ width }) => width >= 1280)
        .sort((a, b) => a.width - b.width || a.name.localeCompare(b.name));
      return candidates[0] ? [join(images, candidates[0].name)] : [];
    });
}

export interface Rgba {
  data: Buffer;
  width: number;
  height: number;
}

/** The tight box of pixels with alpha above a small threshold. */
function alphaBounds({ data, width, height }: Rgba): {
  left: number;
  top: number;
  width: number;
  height: number;
} {
  let [minX, minY, maxX, maxY] = [width, height, -1, -1];
  for (let y = 0; y < height; y += 1)
    for (let x = 0; x < width; x += 1)
      if (data[(y * width + x) * 4 + 3]! > 16)
        [minX, minY, maxX, maxY] = [
          Math.min(minX, x),
          Math.min(minY, y),
          Math.max(maxX, x),
          Math.max(maxY, y),
        ];
  if (maxX < 0) return { left: 0, top: 0, width, height };
  return { left: minX, top: minY, width: maxX - minX + 1, height: maxY - minY + 1 };
}

export async function trimmedRgba(input: Sharp | Buffer, raw?: CreateRaw): Promise<Rgba> {
  const pipeline = Buffer.isBuffer(input) ? sharp(input, raw ? { raw } : {}) : input;
  const { data, info } = await pipeline.ensureAlpha().raw().toBuffer({ resolveWithObject: true });
  const full = { data, width: info.width, height: info.height };
  const bounds = alphaBounds(full);
  const cut = await sharp(data, { raw: { width: info.width, height: info.height, channels: 4 } })
    .extract(bounds)
    .raw()
    .toBuffer();
  return { data: cut, width: bounds.width, height: bounds.height };
}

const rawOf = (image: Rgba): { raw: CreateRaw } => ({
  raw: { width: image.width, height: image.height, channels: 4 },
});

export async function packshot(stamp: Rgba): Promise<Buffer> {
  const side = Math.round(Math.max(stamp.width, stamp.height) * 1.1);
  return sharp({ create: { width: side, height: side, channels: 3, background: { r: 255, g: 255, b: 255 } } })
    .composite([
      {
        input: stamp.data,
        ...rawOf(stamp),
        left: Math.floor((side - stamp.width) / 2),
        top: Math.floor((side - stamp.height) / 2),
      },
    ])
    .png()
    .toBuffer();
}

export async function makeQuery(
  stamp: Rgba,
  backgrounds: string[],
  random: () => number,
): Promise<{ bytes: Buffer; box: Box; kind: Query['kind']; mirrored: boolean }> {
  const between = (low: number, high: number): number => low + (high - low) * random();
  const kind: Query['kind'] = random() < 0.7 ? 'scene' : 'flat';
  const { width, height } = kind === 'scene' ? SCENE_SIZE : { width: FLAT_SIZE, height: FLAT_SIZE };
  let canvas: Sharp;
  if (kind === 'scene') {
    const background = backgrounds[Math.floor(random() * backgrounds.length)]!;
    const zoom = between(1, 1.8);
    const scaledWidth = Math.round(width * zoom);
    const scaledHeight = Math.round(height * zoom);
    const resized = await sharp(background).resize(scaledWidth, scaledHeight, { fit: 'cover' }).toBuffer();
    canvas = sharp(resized).extract({
      left: Math.floor(random() * (scaledWidth - width + 1)),
      top: Math.floor(random() * (scaledHeight - height + 1)),
      width,
      height,
    });
  } else {
    const grey = Math.round(between(215, 255));
    canvas = sharp({
      create: {
        width,
        height,
        channels: 3,
        background: { r: grey, g: grey, b: Math.round(between(215, 255)) },
      },
    });
  }
  // Upper bounds keep the rotated object (up to 1.37× wider at ±20°) inside the canvas.
  const fraction = kind === 'scene' ? between(0.25, 0.6) : between(0.45, 0.7);
  const longest = Math.max(8, Math.round(fraction * Math.min(width, height)));
  const scale = longest / Math.max(stamp.width, stamp.height);
  const resized = await sharp(stamp.data, rawOf(stamp))
    .resize(Math.max(1, Math.round(stamp.width * scale)), Math.max(1, Math.round(stamp.height * scale)))
    .raw()
    .toBuffer({ resolveWithObject: true });
  const rotated = await trimmedRgba(
    sharp(resized.data, {
      raw: { width: resized.info.width, height: resized.info.height, channels: 4 },
    }).rotate(between(-20, 20), {
      background: { r: 0, g: 0, b: 0, alpha: 0 },
    }),
  );
  const pasted = { width: rotated.width, height: rotated.height };
  const left = Math.floor(random() * (width - pasted.width + 1));
  const top = Math.floor(random() * (height - pasted.height + 1));
  const composed = await canvas
    .composite([{ input: rotated.data, ...rawOf(rotated), left, top }])
    .raw()
    .toBuffer({ resolveWithObject: true });
  let output = sharp(composed.data, { raw: composed.info }).modulate({
    brightness: between(0.8, 1.2),
    saturation: between(0.7, 1.3),
  });
  if (random() < 0.3) output = output.blur(between(0.8, 1.6));
  const mirrored = random() < 0.3;
  if (mirrored) output = output.flop();
  const bytes = await output.jpeg({ quality: Math.round(between(40, 90)) }).toBuffer();
  const box: Box = mirrored
    ? [width - left - pasted.width, top, width - left, top + pasted.height]
    : [left, top, left + pasted.width, top + pasted.height];
  return { bytes, box, kind, mirrored };
}

/** Deterministic subset, stratified by query kind (proportional), in query-id order. */
export function stratifiedSubset(queries: readonly Query[], size: number, subsetSeed: number): Query[] {
  if (size >= queries.length) return [...queries];
  const random = seededRandom(subsetSeed ^ 0x5eed);
  const chosen: Query[] = [];
  for (const kind of ['scene', 'flat'] as const) {
    const ofKind = queries.filter((q) => q.kind === kind);
    const take = Math.round((size * ofKind.length) / queries.length);
    const shuffled = ofKind
      .map((query) => ({ query, key: random() }))
      .sort((a, b) => a.key - b.key)
      .map(({ query }) => query);
    chosen.push(...shuffled.slice(0, take));
  }
  return chosen.sort((a, b) => a.id - b.id);
}

/** A query image cut to its true object box (clamped to the image): the perfect-detector crop. */
export async function cropToBox(bytes: Buffer, box: Query['box']): Promise<Buffer> {
  const image = sharp(bytes);
  const { width = 0, height = 0 } = await image.metadata();
  const [x0, y0, x1, y1] = box;
  const left = Math.max(0, Math.floor(x0));
  const top = Math.max(0, Math.floor(y0));
  const right = Math.min(width, Math.ceil(x1));
  const bottom = Math.min(height, Math.ceil(y1));
  return image
    .extract({ left, top, width: Math.max(1, right - left), height: Math.max(1, bottom - top) })
    .toBuffer();
}

export async function loadRetrievalBenchmark(seed: number): Promise<RetrievalBenchmark> {
  const directory = join(EVAL_DATA_DIR, `retrieval-v1-seed${seed}`);
  const indexFile = join(directory, 'benchmark.json');
  if (existsSync(indexFile))
    return {
      directory,
      ...(JSON.parse(readFileSync(indexFile, 'utf8')) as Omit<RetrievalBenchmark, 'directory'>),
    };

  const started = performance.now();
  const stampsRoot = join(EVAL_ROOT, STAMPS_DIR);
  const backgrounds = backgroundFiles();
  if (backgrounds.length === 0) throw new Error('no wallpapers found: run eval/fetch-data.ts');
  mkdirSync(join(directory, 'catalogue'), { recursive: true });
  mkdirSync(join(directory, 'queries'), { recursive: true });
  const random = seededRandom(seed);
  const items: CatalogueItem[] = [];
  const queries: Query[] = [];
  for (const path of stampFiles()) {
    if (statSync(path).size === 0) continue;
    const stamp = await trimmedRgba(readFileSync(path));
    if (Math.max(stamp.width, stamp.height) < 32) continue;
    const id = items.length;
    const stampPath = relative(stampsRoot, path);
    const file = `catalogue/${String(id).padStart(4, '0')}-${basename(path)}`;
    writeFileSync(join(directory, file), await packshot(stamp));
    const coco = cocoLabelOfStamp(stampPath);
    items.push({ id, stamp: stampPath, file, ...(coco ? { coco } : {}) });
    const query = await makeQuery(stamp, backgrounds, random);
    const queryFile = `queries/${String(id).padStart(4, '0')}.jpg`;
    writeFileSync(join(directory, queryFile), query.bytes);
    queries.push({
      id,
      item: id,
      kind: query.kind,
      file: queryFile,
      box: query.box,
      mirrored: query.mirrored,
    });
  }
  writeFileSync(
    indexFile,
    JSON.stringify(
      { seed, backgrounds: backgrounds.map((path) => relative(EVAL_ROOT, path)), items, queries },
      null,
      1,
    ),
  );
  console.error(
    `eval: built ${items.length} catalogue items and ${queries.length} queries in ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  return { directory, items, queries };
}
