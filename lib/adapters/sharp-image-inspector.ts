import sharp, { type Metadata } from 'sharp';
import { InvalidImageError } from '#lib/domain/errors.ts';
import type { ImageInfo, ImageInspector, PixelBox } from '#lib/ports.ts';
import { boundedQuery, cropRegions, refusalBeforeDecoding } from '#lib/vision/image-input.ts';

const ALLOWED_FORMATS = new Set(['jpeg', 'png', 'webp', 'gif', 'heif', 'tiff']);

/**
 * Reads an image's header with sharp (no pixel decode), so unsupported formats and decompression bombs
 * are refused before any work is spent on them.
 */
export class SharpImageInspector implements ImageInspector {
  constructor(private readonly maxPixels: number) {}

  async inspect(bytes: Buffer, subject = 'imageData'): Promise<ImageInfo> {
    let meta: Metadata;
    try {
      // Header only: no pixels are decoded here, so the size check below runs before any decode.
      meta = await sharp(bytes, { limitInputPixels: false }).metadata();
    } catch {
      throw new InvalidImageError(`${subject} is not a decodable image.`);
    }
    const format = meta.format ?? 'unknown';
    // AVIF is read through libheif and reported as heif; HEIC proper is not among the supported formats.
    if (!ALLOWED_FORMATS.has(format) || (format === 'heif' && meta.compression !== 'av1')) {
      throw new InvalidImageError(
        `Unsupported image format ${format}; send JPEG, PNG, WebP, GIF, AVIF or TIFF.`,
      );
    }
    const width = meta.autoOrient?.width ?? meta.width ?? 0;
    const height = meta.autoOrient?.height ?? meta.height ?? 0;
    if (width <= 0 || height <= 0) throw new InvalidImageError(`${subject} has no pixels.`);
    if (width * height > this.maxPixels) {
      throw new InvalidImageError(
        `Image of ${width}x${height} pixels exceeds the limit of ${this.maxPixels / 1_000_000} megapixels.`,
      );
    }
    const refusal = refusalBeforeDecoding(bytes, format, width, height);
    if (refusal) throw new InvalidImageError(refusal);
    return { format: format === 'heif' ? 'avif' : format, width, height };
  }

  async crops(bytes: Buffer, boxes: readonly PixelBox[]): Promise<Buffer[]> {
    await this.inspect(bytes);
    return cropRegions(bytes, boxes);
  }

  bounded(bytes: Buffer): Promise<{ bytes: Buffer; width: number; height: number }> {
    return boundedQuery(bytes);
  }
}
