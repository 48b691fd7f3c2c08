/**
 * Turning submitted image bytes into model input tensors with sharp.
 *
 * Every path starts with `openImage`, which reads the header only and refuses what we will not decode:
 * formats outside the allow-list (SVG, raw, HEVC HEIF…) and images over 40 megapixels (decompression
 * bombs), before any pixel is decoded. Pixels are then EXIF-oriented (`.rotate()`) so that boxes and crops
 * refer to the image as a viewer shows it, and transparency is flattened onto white, which is how shops
 * present packshots.
 */
import sharp, { type Metadata, type OutputInfo, type Sharp } from 'sharp';
import { InvalidImageError } from '#lib/domain/errors.ts';
import { jpegScanCount } from '#lib/vision/jpeg-scans.ts';

export const MAX_INPUT_PIXELS = 40_000_000;
/**
 * Longest side accepted, whatever the pixel count. Under 40 megapixels, a 39,000,000 × 1 PNG of 303 KB
 * took 10.6 GB of memory to search (libvips' resizes of so extreme a strip, three at once: embedder,
 * regional pass, keypoints) and a 1 × 39,000,000 one 8–15 s of CPU (per-row decoding costs): an
 * adversarial probe, 2026-11-26. 16,384 is WebP's own limit and far above any product photo.
 */
export const MAX_IMAGE_SIDE = 16_384;
/** Most scans a JPEG may have (lib/vision/jpeg-scans.ts: decode time grows with them). */
export const MAX_JPEG_SCANS = 100;
const WHITE = { r: 255, g: 255, b: 255 };

/** [x_min, y_min, x_max, y_max] in pixels of the oriented image. */
export type Box = [number, number, number, number];

export interface OrientedImage {
  /** Size after EXIF orientation, i.e. the coordinate frame of boxes. */
  width: number;
  height: number;
  format: string;
  /** A sharp pipeline already oriented and flattened; clone it per use. */
  pipeline: Sharp;
}

function formatOf(metadata: Metadata): string | undefined {
  if (metadata.format === 'heif') return metadata.compression === 'av1' ? 'avif' : undefined;
  return ['jpeg', 'png', 'webp', 'gif', 'tiff'].includes(metadata.format ?? '') ? metadata.format : undefined;
}

/** Decoder failures are the client's problem (422); anything else is ours and propagates unchanged. */
function isDecoderError(error: unknown): error is Error {
  return (
    error instanceof Error &&
    !(error instanceof InvalidImageError) &&
    !(error instanceof TypeError) &&
    !(error instanceof RangeError)
  );
}

/** Runs a sharp operation, reporting undecodable input as InvalidImageError. */
export async function decoding<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    if (isDecoderError(error)) {
      const reason = /pixel limit/i.test(error.message)
        ? 'the image has too many pixels'
        : 'the image could not be decoded';
      throw new InvalidImageError(`Invalid image: ${reason}.`);
    }
    throw error;
  }
}

/**
 * Why an image whose header reads `format`, `width` × `height` is refused before decoding, beyond the
 * pixel limit: a side over `MAX_IMAGE_SIDE`, or a JPEG of more than `MAX_JPEG_SCANS` scans. Undefined
 * when it may be decoded. The image inspector (the use cases' first check) and `openImage` (every model's
 * input) both apply it.
 */
export function refusalBeforeDecoding(
  bytes: Uint8Array,
  format: string,
  width: number,
  height: number,
): string | undefined {
  if (Math.max(width, height) > MAX_IMAGE_SIDE)
    return `Image of ${width}x${height} pixels exceeds the limit of ${MAX_IMAGE_SIDE} pixels per side.`;
  if (format === 'jpeg' && jpegScanCount(bytes, MAX_JPEG_SCANS) > MAX_JPEG_SCANS)
    return `JPEG with more than ${MAX_JPEG_SCANS} scans is not accepted (encoders write about 10).`;
  return undefined;
}

/** Reads the header, enforces the format allow-list and pixel limit, and prepares an oriented pipeline. */
export async function openImage(bytes: Buffer): Promise<OrientedImage> {
  if (bytes.length === 0) throw new InvalidImageError('Invalid image: empty image data.');
  const metadata = await decoding(() => sharp(bytes, { limitInputPixels: MAX_INPUT_PIXELS }).metadata());
  const format = formatOf(metadata);
  if (!format) {
    throw new InvalidImageError(
      'Invalid image: unsupported format (allowed: JPEG, PNG, WebP, GIF, AVIF, TIFF).',
    );
  }
  const { width, height } = metadata;
  if (!width || !height) throw new InvalidImageError('Invalid image: the image has no size.');
  if (width * height > MAX_INPUT_PIXELS)
    throw new InvalidImageError('Invalid image: the image has too many pixels.');
  const refusal = refusalBeforeDecoding(bytes, format, width, height);
  if (refusal) throw new InvalidImageError(`Invalid image: ${refusal}`);
  // EXIF orientations 5–8 swap the axes.
  const swapped = (metadata.orientation ?? 1) >= 5;
  const pipeline = await orientedPipeline(bytes, metadata);
  return { width: swapped ? height : width, height: swapped ? width : height, format, pipeline };
}

/**
 * The oriented pipeline, transparency flattened onto white. An 8-bit image with more bands than its
 * colour space and one alpha (a TIFF with extra samples: a saved mask, spot channels) keeps only those:
 * flatten refused five bands (422), and a grey image with three extra samples was read as colour.
 */
async function orientedPipeline(bytes: Buffer, metadata: Metadata): Promise<Sharp> {
  const oriented = () => sharp(bytes, { limitInputPixels: MAX_INPUT_PIXELS }).rotate();
  const colour = metadata.space === 'b-w' ? 1 : 3;
  const keep = colour + (metadata.hasAlpha ? 1 : 0);
  const extra = (metadata.channels ?? keep) > keep && metadata.space !== 'cmyk' && metadata.depth === 'uchar';
  if (!extra) return oriented().flatten({ background: WHITE });
  const { data, info } = await decoding(() => oriented().raw().toBuffer({ resolveWithObject: true }));
  // The decoded raster may have widened the colour bands (grey to sRGB): the extra bands are its last.
  const bands = Math.min(4, Math.max(1, info.channels - (metadata.channels! - keep)));
  const kept = Buffer.alloc(info.width * info.height * bands);
  for (let from = 0, to = 0; to < kept.length; from += info.channels)
    for (let band = 0; band < bands; band += 1) kept[to++] = data[from + band]!;
  return sharp(kept, {
    raw: { width: info.width, height: info.height, channels: bands as 1 | 2 | 3 | 4 },
  }).flatten({ background: WHITE });
}

/** Integer pixel rectangle inside the image covering the (float) box; at least 1×1. */
export function clampToPixels(
  box: Box,
  width: number,
  height: number,
): { left: number; top: number; width: number; height: number } {
  const left = Math.min(width - 1, Math.max(0, Math.floor(box[0])));
  const top = Math.min(height - 1, Math.max(0, Math.floor(box[1])));
  const right = Math.max(left + 1, Math.min(width, Math.ceil(box[2])));
  const bottom = Math.max(top + 1, Math.min(height, Math.ceil(box[3])));
  return { left, top, width: right - left, height: bottom - top };
}

/** RGB bytes of the whole image squashed ("fill") to width×height; `pipeline` is consumed (clone first). */
export function rgbFilled(pipeline: Sharp, width: number, height: number): Promise<Buffer> {
  return decoding(() => pipeline.resize(width, height, { fit: 'fill' }).removeAlpha().raw().toBuffer());
}

/**
 * RGB bytes of size×size squares, one per requested region (`undefined` = the whole image), each
 * squashed to the square ("fill"): the whole object is kept, at the cost of its aspect ratio.
 */
export async function rgbSquares(
  image: OrientedImage,
  size: number,
  regions: readonly (Box | undefined)[],
): Promise<Buffer[]> {
  const square = (pipeline: Sharp): Promise<Buffer> => rgbFilled(pipeline, size, size);
  if (regions.every((region) => region === undefined))
    return Promise.all(regions.map(() => square(image.pipeline.clone())));
  const regionOf = await decodedOnce(image);
  return Promise.all(regions.map((region) => square(regionOf(region))));
}

/**
 * The oriented image decoded once; each call gives a pipeline of one region of it (all of it without a
 * box). Orientation must happen before extraction, and AVIF or progressive JPEG cannot decode a region
 * alone: each region cut from the same pixels costs no decode of its own.
 */
async function decodedOnce(image: OrientedImage): Promise<(box?: Box) => Sharp> {
  const oriented = await decodedForRegions(image);
  const { width, height, channels } = oriented.info;
  const raw = { raw: { width, height, channels } };
  // Boxes are in the oriented image's pixels; a reduced decode (below) has fewer.
  const [scaleX, scaleY] = [width / image.width, height / image.height];
  return (box) => {
    const pipeline = sharp(oriented.data, raw);
    if (!box) return pipeline;
    const scaled: Box = [box[0] * scaleX, box[1] * scaleY, box[2] * scaleX, box[3] * scaleY];
    return pipeline.extract(clampToPixels(scaled, width, height));
  };
}

/** JPEG shrink-on-load factors a region decode falls back to, in order. */
const JPEG_FALLBACK_SHRINKS = [2, 4, 8];

/**
 * The oriented image's pixels at full size; for a JPEG that libjpeg reports as corrupt at full size, the
 * largest reduced decode that reads (its shrink-on-load factors). The search stages decode a JPEG reduced,
 * where slightly damaged scan data goes unreported: such a photo was 200 for image search and detection
 * but 422 for OD+SEARCH, whose crops came from the full decode. A truncated file fails at every size.
 */
async function decodedForRegions(image: OrientedImage): Promise<{ data: Buffer; info: OutputInfo }> {
  const full = () => image.pipeline.clone().raw().toBuffer({ resolveWithObject: true });
  try {
    return await decoding(full);
  } catch (error) {
    if (image.format !== 'jpeg' || !(error instanceof InvalidImageError)) throw error;
    for (const shrink of JPEG_FALLBACK_SHRINKS) {
      const [width, height] = [Math.ceil(image.width / shrink), Math.ceil(image.height / shrink)];
      if (width < 2 || height < 2) break;
      const reduced = await decoding(() =>
        image.pipeline
          .clone()
          .resize(width, height, { fit: 'fill' })
          .raw()
          .toBuffer({ resolveWithObject: true }),
      ).catch(() => undefined);
      if (reduced) return reduced;
    }
    throw error;
  }
}

export interface Letterboxed {
  rgb: Buffer;
  /** Factor from model-input pixels back to oriented-image pixels, per axis. */
  scaleX: number;
  scaleY: number;
}

/**
 * Scales the longest side to `size`, keeps the aspect ratio and pads right and bottom with `padding`
 * (so model-input coordinates map back by a plain scale, no offset).
 */
export async function rgbLetterbox(
  image: OrientedImage,
  size: number,
  padding: { r: number; g: number; b: number },
): Promise<Letterboxed> {
  const scale = size / Math.max(image.width, image.height);
  const width = Math.max(1, Math.min(size, Math.round(image.width * scale)));
  const height = Math.max(1, Math.min(size, Math.round(image.height * scale)));
  const rgb = await decoding(() =>
    image.pipeline
      .clone()
      .resize(width, height, { fit: 'fill' })
      .extend({ right: size - width, bottom: size - height, background: padding })
      .removeAlpha()
      .raw()
      .toBuffer(),
  );
  return { rgb, scaleX: image.width / width, scaleY: image.height / height };
}

/** Interleaved RGB bytes → float NHWC in [0, 1], written into `target` at `offset`. */
export function writeRgbUnit(rgb: Buffer, target: Float32Array, offset: number): void {
  for (let i = 0; i < rgb.length; i += 1) target[offset + i] = rgb[i]! / 255;
}

/** Interleaved RGB bytes → planar BGR NCHW, normalised as (v − mean) / std per BGR channel. */
export function rgbToNormalisedBgrPlanes(
  rgb: Buffer,
  mean: readonly number[],
  std: readonly number[],
): Float32Array {
  const pixels = rgb.length / 3;
  const out = new Float32Array(rgb.length);
  for (let plane = 0; plane < 3; plane += 1) {
    const source = 2 - plane; // BGR plane 0 takes the R-G-B triple's byte 2 (blue)
    const m = mean[plane]!;
    const s = std[plane]!;
    const base = plane * pixels;
    for (let p = 0; p < pixels; p += 1) out[base + p] = (rgb[p * 3 + source]! - m) / s;
  }
  return out;
}

/** Longest side of a crop handed to the models: the embedder reads 224 px, the keypoints at most 640. */
export const CROP_MAX_SIDE = 1024;

/**
 * Each box's region of the oriented image, losslessly re-encoded with its long side at most
 * CROP_MAX_SIDE. The image is decoded once for all boxes: a crop per box, each decoding the whole image,
 * took a 40-megapixel AVIF with 44 detected objects to 4.3 GB and 50 s (AVIF and progressive JPEG
 * cannot decode a region alone), and every crop's decode at full size was a 500 for a damaged JPEG that
 * the reduced decodes accept.
 */
export async function cropRegions(bytes: Buffer, boxes: readonly Box[]): Promise<Buffer[]> {
  if (boxes.length === 0) return [];
  const regionOf = await decodedOnce(await openImage(bytes));
  return decoding(() =>
    Promise.all(
      boxes.map((box) =>
        regionOf(box)
          .resize(CROP_MAX_SIDE, CROP_MAX_SIDE, { fit: 'inside', withoutEnlargement: true })
          .png({ compressionLevel: 1 })
          .toBuffer(),
      ),
    ),
  );
}

/**
 * Longest side of a query image as the search stages read it: the largest of them reads 640 px
 * (keypoints), the second look's boxes somewhat more of small objects.
 */
export const QUERY_MAX_SIDE = 2048;

/**
 * The query as the search stages read it: the submitted bytes when their long side is at most
 * QUERY_MAX_SIDE or they are a JPEG; else the oriented image scaled down once and stored uncompressed
 * (TIFF, which every stage decodes at once). The stages run side by side and each decodes its input:
 * three full decodes of a 40-megapixel AVIF at once took 1.8 GB of memory. A JPEG is decoded at a
 * fraction of its size by each stage already (shrink-on-load), and a full decode of it would refuse
 * slightly damaged files those reduced decodes read.
 */
export async function boundedQuery(bytes: Buffer): Promise<{ bytes: Buffer; width: number; height: number }> {
  const image = await openImage(bytes);
  if (Math.max(image.width, image.height) <= QUERY_MAX_SIDE || image.format === 'jpeg')
    return { bytes, width: image.width, height: image.height };
  const { data, info } = await decoding(() =>
    image.pipeline
      .clone()
      .resize(QUERY_MAX_SIDE, QUERY_MAX_SIDE, { fit: 'inside' })
      .removeAlpha()
      .tiff({ compression: 'none' })
      .toBuffer({ resolveWithObject: true }),
  );
  return { bytes: data, width: info.width, height: info.height };
}
