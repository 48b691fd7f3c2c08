/**
 * Regional descriptors of a query (R-MAC-style regions, scored by their best match): one backbone pass
 * over a raster larger than the embedder's 224 px gives a map of block-16 features (stride 32, e.g. 14×11
 * cells for a 640×480 photo); every square window of 3, 5 and 7 cells is mean-pooled, L2-normalised and
 * passed through the window projection (a learned matrix of its own, trained to place windows next to
 * the catalogue's projected vectors: lib/vision/projection.ts WINDOW_PROJECTION_SPEC), like a crop of the
 * query embedded on its own. A product covering a quarter of a room photo is then compared by the window
 * that holds it, not by the whole frame.
 *
 * Measured on the project benchmark (`npx tsx eval/window-projection.ts`, docs/vision.md): over the whole
 * catalogue, the best window ranks the true item first for 0.49 of the held-aside scene queries (R@10
 * 0.77; 0.43 / 0.75 through the catalogue's projection), the whole image for 0.14 (R@10 0.39). The windows (3/5/7 cells every 2nd position, and the whole map)
 * scored the same as 3/4/5/6/8 cells at every position on the tuning queries, with a third as many.
 *
 * The projection is linear before its normalisation, which is what makes many regions cheap: each cell is
 * projected once (y_c = W·x_c, inside the graph), a region's projected sum is then a sum of cell
 * projections (read off a summed-area table), and only its norm needs the unprojected sum:
 * `W·(s/|s| − μ) = (Σ y_c)/|s| − W·μ` with `s = Σ x_c` over the region's cells.
 */
import type { Projection } from '#lib/vision/projection.ts';

/** Window sides, in cells, of the regions pooled from the map; the last one is the whole map. */
export const REGION_SIDES: readonly number[] = [3, 5, 7, Number.POSITIVE_INFINITY];
/**
 * Offset between neighbouring windows, in cells. Every 2nd position scored the same as every one (scene
 * R@1 0.54 vs 0.53 over the catalogue, 100 tuning queries, before the windows flush with the far edge
 * were added): 75 windows instead of 219 for a 640×480 photo.
 */
export const REGION_STEP = 2;
/** Longest side of the regional pass's raster (a multiple of the stride). */
export const REGIONAL_LONG_SIDE = 448;
/** Shortest side it may have (thin images keep a few cells across). */
const REGIONAL_MIN_SIDE = 96;
const STRIDE = 32;

/** Block-16 features of one image: `rows`×`cols` cells of `channels` values, row-major (NHWC). */
export interface FeatureMap {
  rows: number;
  cols: number;
  channels: number;
  data: Float32Array;
  /**
   * Each cell times the projection's matrix (y_c = W·x_c, `rows`×`cols`×outDim), computed by the graph
   * (REGIONAL_SPEC.projectedOutputName) from `projectionInput(projection)`.
   */
  projected: Float32Array;
}

/** Wᵀ (inDim × outDim, row-major): what the regional graph multiplies the map by. */
export function projectionInput(projection: Projection): Float32Array {
  const { inDim, outDim, matrix } = projection;
  const transposed = new Float32Array(inDim * outDim);
  for (let o = 0; o < outDim; o += 1)
    for (let k = 0; k < inDim; k += 1) transposed[k * outDim + o] = matrix[o * inDim + k]!;
  return transposed;
}

/**
 * Raster of the regional pass for an oriented image of `width`×`height`: the long side at
 * `REGIONAL_LONG_SIDE`, the short side at the same scale, both rounded to whole cells (so a cell is
 * square in the image up to rounding).
 */
export function regionalRasterSize(width: number, height: number): { width: number; height: number } {
  const long = Math.max(width, height, 1);
  const side = (value: number) =>
    Math.max(
      REGIONAL_MIN_SIDE,
      Math.min(REGIONAL_LONG_SIDE, Math.round((value * REGIONAL_LONG_SIDE) / long / STRIDE) * STRIDE),
    );
  return { width: side(width), height: side(height) };
}

/** Summed-area table of a map's cells: (rows+1)×(cols+1) entries of `dim`, zero first row and column. */
interface SummedArea {
  table: Float64Array;
  cols: number;
  dim: number;
}

function summedArea(values: Float32Array, rows: number, cols: number, dim: number): SummedArea {
  const table = new Float64Array((rows + 1) * (cols + 1) * dim);
  const at = (r: number, c: number) => (r * (cols + 1) + c) * dim;
  for (let r = 1; r <= rows; r += 1) {
    for (let c = 1; c <= cols; c += 1) {
      const out = at(r, c);
      const up = at(r - 1, c);
      const left = at(r, c - 1);
      const diagonal = at(r - 1, c - 1);
      const cell = ((r - 1) * cols + (c - 1)) * dim;
      for (let k = 0; k < dim; k += 1)
        table[out + k] = values[cell + k]! + table[up + k]! + table[left + k]! - table[diagonal + k]!;
    }
  }
  return { table, cols, dim };
}

/** The sum of a window's cells, from four corners of the table, written into `out` (length `dim`). */
function windowSum(
  { table, cols, dim }: SummedArea,
  top: number,
  left: number,
  height: number,
  width: number,
  out: Float64Array,
): Float64Array {
  const at = (r: number, c: number) => (r * (cols + 1) + c) * dim;
  const [a, b, c, d] = [
    at(top + height, left + width),
    at(top, left + width),
    at(top + height, left),
    at(top, left),
  ];
  for (let k = 0; k < dim; k += 1) out[k] = table[a + k]! - table[b + k]! - table[c + k]! + table[d + k]!;
  return out;
}

/**
 * The projected, L2-normalised vector of every square window of `REGION_SIDES` cells that fits in the
 * map (a side larger than the map is clipped to it, so a small map still yields its whole extent), in a
 * fixed order: by side, then row, then column. Equal, up to float rounding, to
 * `applyProjection(projection, normalise(mean of the window's cells))` for each window.
 */
export function regionalVectors(map: FeatureMap, projection: Projection): Float32Array[] {
  const { rows, cols, channels, data, projected } = map;
  const { inDim, outDim, matrix, mean } = projection;
  if (channels !== inDim)
    throw new RangeError(`projection expects ${inDim} channels, the map has ${channels}`);
  if (rows <= 0 || cols <= 0) return [];
  if (projected.length !== rows * cols * outDim)
    throw new RangeError(
      `the projected map holds ${projected.length} values, expected ${rows * cols * outDim}`,
    );
  const projectedMean = new Float64Array(outDim);
  for (let o = 0; o < outDim; o += 1) {
    let z = 0;
    for (let k = 0; k < inDim; k += 1) z += matrix[o * inDim + k]! * mean[k]!;
    projectedMean[o] = z;
  }
  const sums = summedArea(data, rows, cols, inDim);
  const projectedSums = summedArea(projected, rows, cols, outDim);
  const sum = new Float64Array(inDim);
  const projectedSum = new Float64Array(outDim);

  return regionWindows(rows, cols).map(({ top, left, height, width }) => {
    const norm = euclidean(windowSum(sums, top, left, height, width, sum));
    const y = windowSum(projectedSums, top, left, height, width, projectedSum);
    return projectedWindow(y, norm, projectedMean);
  });
}

/** A window of the map, in cells. */
export interface RegionWindow {
  top: number;
  left: number;
  height: number;
  width: number;
}

/**
 * The windows of a `rows`×`cols` map in regionalVectors' order: every square of `REGION_SIDES` cells that
 * fits (a side larger than the map clipped to it), by side, then row, then column, each window once.
 */
export function regionWindows(rows: number, cols: number): RegionWindow[] {
  const seen = new Set<string>();
  const out: RegionWindow[] = [];
  for (const side of REGION_SIDES) {
    const height = Math.min(side, rows);
    const width = Math.min(side, cols);
    for (const top of positions(rows, height)) {
      for (const left of positions(cols, width)) {
        // A clipped side can repeat a window already listed (a 3-row map has one 5- and one 7-row band).
        const key = `${top},${left},${height},${width}`;
        if (seen.has(key)) continue;
        seen.add(key);
        out.push({ top, left, height, width });
      }
    }
  }
  return out;
}

/** Window offsets along a side of `length` cells: every `REGION_STEP` cells, and flush with the far edge. */
function positions(length: number, side: number): number[] {
  const last = length - side;
  const out: number[] = [];
  for (let start = 0; start < last; start += REGION_STEP) out.push(start);
  out.push(last);
  return out;
}

function euclidean(values: Float64Array): number {
  let squares = 0;
  for (const value of values) squares += value * value;
  return Math.sqrt(squares);
}

/** normalise(y / |s| − W·μ): the window's projected vector from its sums; zero for an all-zero window. */
function projectedWindow(y: Float64Array, norm: number, projectedMean: Float64Array): Float32Array {
  const vector = new Float32Array(y.length);
  if (norm === 0) return vector;
  let length = 0;
  for (let o = 0; o < y.length; o += 1) {
    const z = y[o]! / norm - projectedMean[o]!;
    vector[o] = z;
    length += z * z;
  }
  length = Math.sqrt(length);
  if (length > 0) for (let o = 0; o < y.length; o += 1) vector[o] = vector[o]! / length;
  return vector;
}

/**
 * Where a region's best cosine reads as no / full evidence; search maps it onto the whole image's scale
 * (the projected one, lib/vision/projection.ts) so that `fusedScore` calibrates both alike. Set on the
 * project benchmark's 30 unrelated photos (docs/quality.md): their best region over the catalogue reached
 * 0.62 (whole image: 0.55), so 0.35/0.75 puts it at the same evidence as the best unrelated whole image,
 * under the cut-off on its own. Since the windows have their own projection (projection-window, 2026-11-25,
 * `npx tsx eval/window-projection.ts`) those photos reach 0.656 (median 0.503) and the true item's best
 * window a median of 0.60 (p90 0.77; 0.55 / 0.74 through the catalogue's projection); the scale was kept,
 * as the full pipeline still answers none of those photos at the cut-off (docs/quality.md).
 */
export const REGIONAL_COSINE_SCALE = { cosineFloor: 0.35, cosineCeiling: 0.75 } as const;
