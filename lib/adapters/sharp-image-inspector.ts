import type { ImageInfo, ImageInspector, PixelBox } from '#lib/ports.ts';
import { boundedQuery, cropRegions, readHeader } from '#lib/vision/image-input.ts';

/**
 * Reads an image's header with sharp (no pixel decode), so unsupported formats and decompression bombs
 * are refused before any work is spent on them.
 */
export class SharpImageInspector implements ImageInspector {
  constructor(private readonly maxPixels: number) {}

  async inspect(bytes: Buffer): Promise<ImageInfo> {
    const { format, width, height } = await readHeader(bytes, this.maxPixels);
    return { format, width, height };
  }

  async crops(bytes: Buffer, boxes: readonly PixelBox[]): Promise<Buffer[]> {
    await this.inspect(bytes);
    return cropRegions(bytes, boxes);
  }

  bounded(bytes: Buffer): Promise<{ bytes: Buffer; width: number; height: number }> {
    return boundedQuery(bytes);
  }
}
