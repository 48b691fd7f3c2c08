/**
 * Turning submitted image bytes into model input tensors with sharp.
 *
 * Every path starts with `readHeader` (through `openImage`, or the image inspector the use cases call
 * first), which reads the header only and refuses what we will not decode: formats outside the allow-list
 * (SVG, HEIC, BMP…, each named), images over 40 megapixels (decompression bombs) and AVIFs over
 * MAX_AVIF_PIXELS, before any pixel is decoded. Pixels are then EXIF-oriented (`.rotate()`) so that boxes
 * and crops refer to the image as a viewer shows it, and transparency is flattened onto white, which is
 * how shops present packshots. An animation (GIF, WebP) is read as its first frame: sharp loads one page
 * unless asked for more.
 */
import sharp, { type Metadata, type OutputInfo, type Sharp } from 'sharp';
import { type ImageRefusal, InvalidImageError } from '#lib/domain/errors.ts';
import { Gate } from '#lib/gate.ts';
import { av1CodedPixels } from '#lib/vision/heif-boxes.ts';
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
/**
 * Most pixels of an AVIF (4096 × 4096: 4K frames, 12-megapixel phone photos and 16-megapixel cameras
 * fit), read from the header. AV1 has no reduced decode, so every stage that reads an AVIF decodes all
 * of it: at 40 megapixels a search's first decode took 1.2–2.6 s and 0.8–1.1 GB of RSS, a process with
 * the models 1.1–1.3 GB for a search and a detection of it (a public function has 2,048 MB in dev), six
 * at once 2.6–3.8 GB; at this limit 0.5–1.3 s, 0.4–0.5 GB, 0.7–0.8 GB with the models
 * (docs/benchmarks.md "Large AVIFs").
 */
export const MAX_AVIF_PIXELS = 4096 * 4096;
const WHITE = { r: 255, g: 255, b: 255 };

/** The formats decoded, as sharp names them, and as users know them. */
const SUPPORTED: Record<string, string> = {
  jpeg: 'JPEG',
  png: 'PNG',
  webp: 'WebP',
  gif: 'GIF',
  avif: 'AVIF',
  tiff: 'TIFF',
};
export const SUPPORTED_FORMATS = Object.values(SUPPORTED).join(', ');

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

function refused(reason: ImageRefusal['reason'], problem: string, format?: string): InvalidImageError {
  return new InvalidImageError({ reason, problem, ...(format ? { format } : {}) });
}

function unsupported(format: string, name: string): InvalidImageError {
  return refused(
    'unsupported_format',
    `${name} is not a supported image format (supported: ${SUPPORTED_FORMATS})`,
    format,
  );
}

/** The ISO BMFF major brand (`ftyp` box at the start: HEIF, AVIF, JPEG XL's container), if any. */
function majorBrand(bytes: Uint8Array): string | undefined {
  if (bytes.length < 12 || Buffer.from(bytes.subarray(4, 8)).toString('latin1') !== 'ftyp') return undefined;
  return Buffer.from(bytes.subarray(8, 12)).toString('latin1');
}

const startsWith = (bytes: Uint8Array, ...prefix: number[]): boolean =>
  prefix.every((byte, i) => bytes[i] === byte);
const ascii = (text: string): number[] => [...text].map((c) => c.charCodeAt(0));
/** Sizes of the BMP info headers (BITMAPCOREHEADER to BITMAPV5HEADER): "BM" alone starts text too. */
const BMP_INFO_HEADER_SIZES = new Set([12, 16, 40, 52, 56, 64, 108, 124]);
const HEVC_BRANDS = new Set(['heic', 'heix', 'heim', 'heis', 'hevc', 'hevx', 'hevm', 'hevs']);

/**
 * Formats this build of sharp has no loader for (`sharp.format`: BMP, JPEG 2000, JPEG XL, PDF, PSD and
 * ICO are not read), or will not open (an AVIF image sequence, a HEIC it cannot parse), told by their
 * first bytes: a refusal names them rather than calling them undecodable. Only bytes sharp could not read
 * are looked at.
 */
const UNREAD_FORMATS: { format: string; name: string; is: (bytes: Uint8Array) => boolean }[] = [
  {
    format: 'bmp',
    name: 'BMP',
    is: (b) =>
      startsWith(b, ...ascii('BM')) && b.length >= 18 && BMP_INFO_HEADER_SIZES.has(b[14]! | (b[15]! << 8)),
  },
  { format: 'heic', name: 'HEIC/HEIF', is: (b) => HEVC_BRANDS.has(majorBrand(b) ?? '') },
  { format: 'jxl', name: 'JPEG XL', is: (b) => startsWith(b, 0xff, 0x0a) || majorBrand(b) === 'jxl ' },
  {
    format: 'jp2',
    name: 'JPEG 2000',
    is: (b) => startsWith(b, 0xff, 0x4f, 0xff, 0x51) || startsWith(b, 0, 0, 0, 12, ...ascii('jP  ')),
  },
  { format: 'pdf', name: 'PDF', is: (b) => startsWith(b, ...ascii('%PDF-')) },
  { format: 'psd', name: 'PSD (Photoshop)', is: (b) => startsWith(b, ...ascii('8BPS')) },
  { format: 'ico', name: 'ICO (icon)', is: (b) => startsWith(b, 0, 0, 1, 0) && b.length >= 22 && b[4]! > 0 },
  // An SVG librsvg will not parse (a DOCTYPE with entities, an external reference): named like one it reads.
  { format: 'svg', name: 'SVG', is: looksLikeSvg },
];

/**
 * XML text (a BOM, whitespace, a prolog, comments or a DOCTYPE first) whose first element is an SVG root
 * (isSvgRoot), in the first 4 KB. Scanned by hand, each part skipped to its end once: a regular
 * expression of those parts backtracked exponentially over a run of comments.
 */
function looksLikeSvg(bytes: Uint8Array): boolean {
  const text = Buffer.from(bytes.subarray(0, 4096)).toString('utf8');
  let at = text.startsWith('\uFEFF') ? 1 : 0;
  for (;;) {
    while (at < text.length && /\s/.test(text[at]!)) at += 1;
    const rest = text.slice(at, at + 9).toLowerCase();
    let end: number;
    if (rest.startsWith('<?')) end = text.indexOf('?>', at) + 2;
    else if (rest.startsWith('<!--')) end = text.indexOf('-->', at + 4) + 3;
    else if (rest.startsWith('<!doctype')) end = doctypeEnd(text, at + 9);
    else return isSvgRoot(text.slice(at));
    if (end <= at) return false;
    at = end;
  }
}

/** The SVG namespace, which a prefixed root element binds its prefix to. */
const SVG_NAMESPACE = 'http://www.w3.org/2000/svg';

/**
 * Whether `element` starts with an SVG root element: `<svg`, or `<prefix:svg` whose start tag binds the
 * prefix to the SVG namespace (librsvg reads `<svg:svg xmlns:svg="…/2000/svg">` as an SVG; an `svg`
 * element of another namespace is none).
 */
function isSvgRoot(element: string): boolean {
  const root = /^<(?:([A-Za-z_][\w.-]*):)?svg[\s>/]/i.exec(element.slice(0, 256));
  if (!root) return false;
  const prefix = root[1];
  if (prefix === undefined) return true;
  const tagEnd = startTagEnd(element);
  const tag = tagEnd === -1 ? element : element.slice(0, tagEnd);
  // Each attribute, its name then its quoted value: a prefix bound in a value's text binds nothing.
  const bindings = tag.matchAll(/\s([^\s=]+)\s*=\s*(?:"([^"]*)"|'([^']*)')/g);
  return [...bindings].some(
    ([, name, double, single]) => name === `xmlns:${prefix}` && (double ?? single) === SVG_NAMESPACE,
  );
}

/** Where the start tag `element` begins with ends: its first '>' outside a quoted attribute value, or -1. */
function startTagEnd(element: string): number {
  let quote: string | undefined;
  for (let i = 0; i < element.length; i += 1) {
    const c = element[i];
    if (quote !== undefined) {
      if (c === quote) quote = undefined;
    } else if (c === '"' || c === "'") quote = c;
    else if (c === '>') return i;
  }
  return -1;
}

/**
 * Where a DOCTYPE whose name starts at `from` ends (past its '>'), or 0 when not in `text`. Its quoted
 * literals and its internal subset ([…], with the comments and processing instructions there) may hold
 * '>', '[' and ']' of their own; each is skipped to its end once.
 */
function doctypeEnd(text: string, from: number): number {
  let subset = false;
  for (let i = from; i < text.length; i += 1) {
    const c = text[i];
    // What is skipped to its end: [its opening, its closing].
    let skip: [string, string] | undefined;
    if (subset && text.startsWith('<!--', i)) skip = ['<!--', '-->'];
    else if (subset && text.startsWith('<?', i)) skip = ['<?', '?>'];
    else if (c === '"' || c === "'") skip = [c, c];
    else if (c === '[' || c === ']') subset = c === '[';
    else if (c === '>' && !subset) return i + 1;
    if (skip) {
      const at = text.indexOf(skip[1], i + skip[0].length);
      if (at === -1) return 0;
      i = at + skip[1].length - 1;
    }
  }
  return 0;
}

/** The refusal of bytes sharp could not read: a format we can name, or undecodable. */
function unreadable(bytes: Uint8Array): InvalidImageError {
  // libvips opens an AVIF by its major brand, which a sequence's is not; its still frame is not read.
  if (majorBrand(bytes) === 'avis') {
    return refused(
      'unsupported_format',
      `an animated AVIF (an AVIF image sequence) is not supported; send a still image (${SUPPORTED_FORMATS})`,
      'avif-sequence',
    );
  }
  const known = UNREAD_FORMATS.find((candidate) => candidate.is(bytes));
  if (known) return unsupported(known.format, known.name);
  return refused('undecodable', `the data is not a decodable image (supported: ${SUPPORTED_FORMATS})`);
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
      throw /pixel limit/i.test(error.message)
        ? refused('too_many_pixels', 'the image has too many pixels')
        : refused('undecodable', 'the image could not be decoded (it may be damaged or cut short)');
    }
    throw error;
  }
}

export interface ImageHeader {
  /** One of SUPPORTED's keys (an AVIF is `avif`, which sharp reports as `heif`). */
  format: string;
  /** Size after EXIF orientation. */
  width: number;
  height: number;
  metadata: Metadata;
}

/**
 * Reads the header (no pixel is decoded) and refuses what will not be decoded: a format outside the
 * allow-list, more than `maxPixels` pixels, a side over MAX_IMAGE_SIDE, an AVIF over MAX_AVIF_PIXELS, a
 * JPEG of more than MAX_JPEG_SCANS scans. The image inspector (the use cases' first check, `maxPixels`
 * from the configuration) and `openImage` (every model's input) both read images through it.
 */
export async function readHeader(bytes: Buffer, maxPixels = MAX_INPUT_PIXELS): Promise<ImageHeader> {
  if (bytes.length === 0) throw refused('empty', 'the image is empty (0 bytes)');
  let metadata: Metadata;
  try {
    metadata = await sharp(bytes, { limitInputPixels: false }).metadata();
  } catch (error) {
    if (isDecoderError(error)) throw unreadable(bytes);
    throw error;
  }
  const read = metadata.format ?? 'unknown';
  // An AV1 item is an AVIF whatever the file's brand (sharp guesses the codec from a `mif1` brand).
  const codedPixels = read === 'heif' ? av1CodedPixels(bytes) : undefined;
  const av1 = metadata.compression === 'av1' || codedPixels !== undefined;
  const format = read === 'heif' ? (av1 ? 'avif' : 'heic') : read;
  if (!SUPPORTED[format]) {
    throw unsupported(format, format === 'heic' ? 'HEIC/HEIF' : format.toUpperCase());
  }
  if (!metadata.width || !metadata.height) throw refused('no_pixels', 'the image has no pixels', format);
  // EXIF orientations 5–8 swap the axes.
  const swapped = (metadata.orientation ?? 1) >= 5;
  const [width, height] = swapped ? [metadata.height, metadata.width] : [metadata.width, metadata.height];
  const size = `${width}x${height} pixels`;
  if (width * height > maxPixels) {
    throw refused(
      'too_many_pixels',
      `an image of ${size} exceeds the limit of ${maxPixels / 1_000_000} megapixels`,
      format,
    );
  }
  if (Math.max(width, height) > MAX_IMAGE_SIDE) {
    throw refused(
      'side_too_long',
      `an image of ${size} exceeds the limit of ${MAX_IMAGE_SIDE} pixels per side`,
      format,
    );
  }
  // What the decoder decodes, which a crop box or a grid's declared size can hide (heif-boxes.ts).
  // (An AVIF whose items cannot be read, or that hides an item's size, is not decoded to find out.)
  if (codedPixels === Number.POSITIVE_INFINITY || (format === 'avif' && codedPixels === undefined))
    throw refused(
      'undecodable',
      'an AVIF whose image items and sizes cannot be read is not accepted',
      format,
    );
  const decoded = Math.max(width * height, codedPixels ?? 0);
  if (format === 'avif' && decoded > MAX_AVIF_PIXELS) {
    const what = decoded > width * height ? `coding ${(decoded / 1e6).toFixed(1)} megapixels` : `of ${size}`;
    throw refused(
      'too_many_pixels',
      `an AVIF ${what} exceeds the AVIF limit of ${(MAX_AVIF_PIXELS / 1e6).toFixed(1)} megapixels ` +
        '(4096x4096): send it smaller, or as JPEG',
      format,
    );
  }
  if (format === 'jpeg' && jpegScanCount(bytes, MAX_JPEG_SCANS) > MAX_JPEG_SCANS) {
    throw refused(
      'too_many_scans',
      `a JPEG of more than ${MAX_JPEG_SCANS} scans is not accepted (encoders write about 10)`,
      format,
    );
  }
  return { format, width, height, metadata };
}

/** Reads the header, enforces the format allow-list and limits, and prepares an oriented pipeline. */
export async function openImage(bytes: Buffer): Promise<OrientedImage> {
  const { format, width, height, metadata } = await readHeader(bytes);
  const pipeline = await orientedPipeline(bytes, metadata);
  return { width, height, format, pipeline };
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
 * QUERY_MAX_SIDE (but for an AVIF) or they are a JPEG; else the oriented image, scaled down to
 * QUERY_MAX_SIDE when larger, decoded once and stored uncompressed (TIFF, which every stage decodes at
 * once). The stages run side by side and each decodes its input: three full decodes of a 40-megapixel
 * AVIF at once took 1.8 GB of memory. A JPEG is decoded at a fraction of its size by each stage already
 * (shrink-on-load), and a full decode of it would refuse slightly damaged files those reduced decodes
 * read. An AVIF has no reduced decode: each stage decoded all of even a small one (a 2000 × 1500 one
 * ~105 ms of CPU each, its TIFF ~5 ms).
 */
export async function boundedQuery(bytes: Buffer): Promise<{ bytes: Buffer; width: number; height: number }> {
  const image = await openImage(bytes);
  const small = Math.max(image.width, image.height) <= QUERY_MAX_SIDE;
  if ((small && image.format !== 'avif') || image.format === 'jpeg')
    return { bytes, width: image.width, height: image.height };
  const { data, info } = await scalingDown.run(() =>
    decoding(() =>
      image.pipeline
        .clone()
        .resize(QUERY_MAX_SIDE, QUERY_MAX_SIDE, { fit: 'inside', withoutEnlargement: true })
        .removeAlpha()
        .tiff({ compression: 'none' })
        .toBuffer({ resolveWithObject: true }),
    ),
  );
  return { bytes: data, width: info.width, height: info.height };
}

/**
 * boundedQuery's full decodes (large queries, AVIFs) in flight at once in a process; the others wait
 * their turn. sharp runs on libuv's pool of 4 threads, and a large non-JPEG decode holds one for up to
 * ~1 s (an AVIF at the limit 0.5–0.7 s, docs/benchmarks.md "Large AVIFs"): six at once filled the pool,
 * and every other search's decodes waited behind them (1.1–1.2 s). Two leave the pool half free. (A
 * Lambda instance serves one request at a time; this is for local mode.)
 */
export const MAX_CONCURRENT_SCALE_DOWNS = 2;

/** The gate of boundedQuery's scale-downs (exported for tests to watch). */
export const scalingDown = new Gate(MAX_CONCURRENT_SCALE_DOWNS);
