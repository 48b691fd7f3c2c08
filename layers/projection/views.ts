/**
 * Augmented views of the training objects, deterministic from a seed: for every object a "packshot"
 * (centred on white, as a shop's catalogue image) and pasted views like a shopper's photo — on a crop of a
 * photographic background at 25–60 % of the short side ("scene") or on a light plain background at
 * 45–70 % ("flat"), rotated ±20°, colour-jittered, sometimes blurred or mirrored, JPEG q40–90 — plus one
 * pasted view cropped to its exact box (what a detector crop gives). The recipe follows the kind of query
 * the service must match (../shared/DATA.md); the images themselves come only from layers/projection/data.ts.
 *
 * Each object draws from its own PRNG (seed, object index), so views can be built in parallel batches and
 * still be identical run to run.
 */
import sharp, { type Sharp } from 'sharp';
import type { SourceImage, TrainingSources } from './data.ts';

/** mulberry32 (same generator as eval/retrieval-benchmark.ts): small and reproducible. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface Rgba {
  data: Buffer;
  width: number;
  height: number;
}

export interface TrainingObject {
  name: string;
  image: Rgba;
}

export type ViewKind = 'packshot' | 'scene' | 'flat' | 'crop';

/** A rectangle in a view's pixels. */
export interface PixelBox {
  left: number;
  top: number;
  width: number;
  height: number;
}

export interface View {
  object: number;
  kind: ViewKind;
  bytes: Buffer;
  /** Pasted views: where the object is (its rotated, trimmed box, mirrored with the view). */
  box?: PixelBox;
}

const SCENE = { width: 640, height: 480 };
const FLAT = 480;
/** Objects and backgrounds are shrunk once to these sizes: views are at most 640 px, the model sees 224. */
const OBJECT_MAX_SIDE = 320;
const BACKGROUND_WIDTH = 1152;

const raw = (image: Rgba) => ({ raw: { width: image.width, height: image.height, channels: 4 as const } });

async function toRgba(pipeline: Sharp): Promise<Rgba> {
  const { data, info } = await pipeline.ensureAlpha().raw().toBuffer({ resolveWithObject: true });
  return { data, width: info.width, height: info.height };
}

/** The tight box of pixels with alpha above 16 (the whole image if none). */
function alphaBounds({ data, width, height }: Rgba): {
  left: number;
  top: number;
  width: number;
  height: number;
} {
  let [minX, minY, maxX, maxY] = [width, height, -1, -1];
  for (let y = 0; y < height; y += 1)
    for (let x = 0; x < width; x += 1)
      if (data[(y * width + x) * 4 + 3]! > 16) {
        if (x < minX) minX = x;
        if (x > maxX) maxX = x;
        if (y < minY) minY = y;
        if (y > maxY) maxY = y;
      }
  if (maxX < 0) return { left: 0, top: 0, width, height };
  return { left: minX, top: minY, width: maxX - minX + 1, height: maxY - minY + 1 };
}

async function trimmed(image: Rgba): Promise<Rgba> {
  return toRgba(sharp(image.data, raw(image)).extract(alphaBounds(image)));
}

async function shrunk(image: Rgba, maxSide: number): Promise<Rgba> {
  const scale = maxSide / Math.max(image.width, image.height);
  if (scale >= 1) return image;
  return toRgba(
    sharp(image.data, raw(image)).resize(
      Math.max(1, Math.round(image.width * scale)),
      Math.max(1, Math.round(image.height * scale)),
    ),
  );
}

async function cutoutObject(source: SourceImage): Promise<TrainingObject | undefined> {
  const image = await trimmed(await toRgba(sharp(source.bytes)));
  if (Math.max(image.width, image.height) < 48) return undefined;
  return { name: source.name, image: await shrunk(image, OBJECT_MAX_SIDE) };
}

/** Distinct objects cut from each full-frame photo (different regions of it). */
export const CROPS_PER_PHOTO = 3;

function photoObjectName(source: SourceImage, crop: number): string {
  return `${source.name}#${crop}`;
}

/** A region of a full-frame photo becomes an object; half of them are cut out as an ellipse. */
async function photoObject(
  source: SourceImage,
  photo: Rgba,
  crop: number,
  random: () => number,
): Promise<TrainingObject> {
  const fw = 0.35 + 0.3 * random();
  const fh = 0.35 + 0.3 * random();
  const width = Math.max(1, Math.round(photo.width * fw));
  const height = Math.max(1, Math.round(photo.height * fh));
  const left = Math.floor(random() * (photo.width - width + 1));
  const top = Math.floor(random() * (photo.height - height + 1));
  let cropped = await shrunk(
    await toRgba(sharp(photo.data, raw(photo)).extract({ left, top, width, height })),
    OBJECT_MAX_SIDE,
  );
  if (random() < 0.5) {
    const mask = Buffer.from(
      `<svg xmlns="http://www.w3.org/2000/svg" width="${cropped.width}" height="${cropped.height}">` +
        `<ellipse cx="${cropped.width / 2}" cy="${cropped.height / 2}" rx="${cropped.width / 2}" ry="${cropped.height / 2}" fill="#fff"/></svg>`,
    );
    cropped = await toRgba(sharp(cropped.data, raw(cropped)).composite([{ input: mask, blend: 'dest-in' }]));
  }
  return { name: photoObjectName(source, crop), image: cropped };
}

/**
 * The training objects in their fixed order: cut-outs and clip art, then `CROPS_PER_PHOTO` crops of each
 * photo. `keep` limits the work to the objects it names (a sample); the kept objects are exactly those of
 * the full list, since every photo's crops are drawn from the photo's own PRNG.
 */
export async function prepareObjects(
  sources: TrainingSources,
  seed: number,
  keep: (name: string) => boolean = () => true,
): Promise<TrainingObject[]> {
  const cutouts = await Promise.all(
    [...sources.cutouts, ...sources.clipart].filter(({ name }) => keep(name)).map(cutoutObject),
  );
  const photos = await Promise.all(
    sources.photos.map(async (source, i) => {
      const names = Array.from({ length: CROPS_PER_PHOTO }, (_, crop) => photoObjectName(source, crop));
      if (!names.some(keep)) return [];
      const photo = await shrunk(await toRgba(sharp(source.bytes)), 1024);
      const random = seededRandom(seed * 7919 + 100_000 + i);
      const objects: TrainingObject[] = [];
      for (let crop = 0; crop < CROPS_PER_PHOTO; crop += 1)
        objects.push(await photoObject(source, photo, crop, random));
      return objects.filter(({ name }) => keep(name));
    }),
  );
  return [...cutouts.filter((object): object is TrainingObject => object !== undefined), ...photos.flat()];
}

export interface Background {
  data: Buffer;
  width: number;
  height: number;
}

export async function prepareBackgrounds(sources: readonly SourceImage[]): Promise<Background[]> {
  return Promise.all(
    sources.map(async ({ bytes }) => {
      const { data, info } = await sharp(bytes)
        .resize({ width: BACKGROUND_WIDTH })
        .removeAlpha()
        .raw()
        .toBuffer({ resolveWithObject: true });
      return { data, width: info.width, height: info.height };
    }),
  );
}

async function packshot(object: Rgba): Promise<Buffer> {
  const side = Math.round(Math.max(object.width, object.height) * 1.1);
  return sharp({ create: { width: side, height: side, channels: 3, background: { r: 255, g: 255, b: 255 } } })
    .composite([
      {
        input: object.data,
        ...raw(object),
        left: Math.floor((side - object.width) / 2),
        top: Math.floor((side - object.height) / 2),
      },
    ])
    .png()
    .toBuffer();
}

async function pasted(
  object: Rgba,
  backgrounds: readonly Background[],
  random: () => number,
): Promise<{ bytes: Buffer; crop: Buffer; kind: 'scene' | 'flat'; box: PixelBox }> {
  const between = (low: number, high: number): number => low + (high - low) * random();
  const kind = random() < 0.7 ? 'scene' : 'flat';
  const { width, height } = kind === 'scene' ? SCENE : { width: FLAT, height: FLAT };
  let canvas: Sharp;
  if (kind === 'scene') {
    const background = backgrounds[Math.floor(random() * backgrounds.length)]!;
    const zoom = between(1, 1.8);
    const cropWidth = Math.min(background.width, Math.round((background.width / zoom) * 0.9));
    const cropHeight = Math.min(background.height, Math.round((cropWidth * height) / width));
    canvas = sharp(background.data, {
      raw: { width: background.width, height: background.height, channels: 3 },
    })
      .extract({
        left: Math.floor(random() * (background.width - cropWidth + 1)),
        top: Math.floor(random() * (background.height - cropHeight + 1)),
        width: cropWidth,
        height: cropHeight,
      })
      .resize(width, height, { fit: 'fill' });
    canvas = sharp(await canvas.raw().toBuffer(), { raw: { width, height, channels: 3 } });
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
  const scale = longest / Math.max(object.width, object.height);
  const resized = await toRgba(
    sharp(object.data, raw(object)).resize(
      Math.max(1, Math.round(object.width * scale)),
      Math.max(1, Math.round(object.height * scale)),
    ),
  );
  const rotated = await trimmed(
    await toRgba(
      sharp(resized.data, raw(resized)).rotate(between(-20, 20), {
        background: { r: 0, g: 0, b: 0, alpha: 0 },
      }),
    ),
  );
  const left = Math.floor(random() * (width - rotated.width + 1));
  const top = Math.floor(random() * (height - rotated.height + 1));
  const composed = await canvas
    .composite([{ input: rotated.data, ...raw(rotated), left, top }])
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
  const box = {
    left: mirrored ? width - left - rotated.width : left,
    top,
    width: rotated.width,
    height: rotated.height,
  };
  const crop = await sharp(bytes).extract(box).png().toBuffer();
  return { bytes, crop, kind, box };
}

/**
 * The views of one object: its packshot first, then `pastes` pasted views, then the box crop of the first
 * scene paste (or of the first paste when all are flat).
 */
export async function objectViews(
  object: TrainingObject,
  index: number,
  backgrounds: readonly Background[],
  seed: number,
  pastes: number,
): Promise<View[]> {
  const random = seededRandom(seed * 7919 + index);
  const views: View[] = [{ object: index, kind: 'packshot', bytes: await packshot(object.image) }];
  const made: Awaited<ReturnType<typeof pasted>>[] = [];
  for (let i = 0; i < pastes; i += 1) made.push(await pasted(object.image, backgrounds, random));
  for (const view of made) views.push({ object: index, kind: view.kind, bytes: view.bytes, box: view.box });
  const forCrop = made.find((view) => view.kind === 'scene') ?? made[0];
  if (forCrop) views.push({ object: index, kind: 'crop', bytes: forCrop.crop });
  return views;
}
