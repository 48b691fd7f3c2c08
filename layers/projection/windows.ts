/**
 * Window views of the training objects, for the window projection (train.ts `trainWindowProjection`): in
 * each pasted view, the regional pass's window (lib/vision/regional.ts, the same windows a search scores)
 * that best covers the pasted object, as the search would see it: the block-16 cells of that window,
 * summed and L2-normalised, before any projection. Trained against the packshots' projected vectors, the
 * window projection learns what a window around a product looks like next to its catalogue image, context
 * and all, instead of the whole-image embedding's view of it.
 */
import type { FeatureMap } from '#lib/vision/regional.ts';
import { regionWindows, type RegionWindow } from '#lib/vision/regional.ts';
import type { PixelBox } from './views.ts';

/** What extractFeatures needs of the regional embedder (lib/adapters/onnx-regional-embedder.ts). */
export interface FeatureMapSource {
  featureMap(image: Buffer): Promise<{ map: FeatureMap; width: number; height: number }>;
}

/** Intersection over union of a window (cells) and a box (already in cells). */
function overlap(window: RegionWindow, box: { left: number; top: number; right: number; bottom: number }) {
  const width = Math.max(
    0,
    Math.min(box.right, window.left + window.width) - Math.max(box.left, window.left),
  );
  const height = Math.max(
    0,
    Math.min(box.bottom, window.top + window.height) - Math.max(box.top, window.top),
  );
  const intersection = width * height;
  const union = (box.right - box.left) * (box.bottom - box.top) + window.width * window.height - intersection;
  return union > 0 ? intersection / union : 0;
}

/**
 * The window of a `rows`×`cols` map that best covers `box` (pixels of an image of `width`×`height`), by
 * intersection over union; the first of equals in regionWindows' order.
 */
export function coveringWindow(
  rows: number,
  cols: number,
  box: PixelBox,
  width: number,
  height: number,
): RegionWindow {
  const [x, y] = [cols / width, rows / height];
  const cells = {
    left: box.left * x,
    top: box.top * y,
    right: (box.left + box.width) * x,
    bottom: (box.top + box.height) * y,
  };
  let best: RegionWindow | undefined;
  let bestOverlap = -1;
  for (const window of regionWindows(rows, cols)) {
    const value = overlap(window, cells);
    if (value > bestOverlap) [best, bestOverlap] = [window, value];
  }
  if (!best) throw new RangeError(`a ${rows}×${cols} map has no windows`);
  return best;
}

/** The L2-normalised sum of a window's cells (unprojected), summed in Float64 in a fixed order. */
export function pooledWindow({ cols, channels, data }: FeatureMap, window: RegionWindow): Float32Array {
  const sum = new Float64Array(channels);
  for (let row = window.top; row < window.top + window.height; row += 1)
    for (let col = window.left; col < window.left + window.width; col += 1) {
      const cell = (row * cols + col) * channels;
      for (let k = 0; k < channels; k += 1) sum[k]! += data[cell + k]!;
    }
  let squares = 0;
  for (const value of sum) squares += value * value;
  const norm = Math.sqrt(squares) || 1;
  return Float32Array.from(sum, (value) => value / norm);
}

/** The window view of one pasted view: its covering window's pooled cells. */
export async function windowFeatures(
  source: FeatureMapSource,
  bytes: Buffer,
  box: PixelBox,
): Promise<Float32Array> {
  const { map, width, height } = await source.featureMap(bytes);
  return pooledWindow(map, coveringWindow(map.rows, map.cols, box, width, height));
}
