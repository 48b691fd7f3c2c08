import { describe, expect, it } from 'vitest';
import { seededRandom } from '#lib/vision/seeded-random.ts';
import { applyProjection, type Projection } from '#lib/vision/projection.ts';
import {
  projectionInput,
  regionalRasterSize,
  regionalVectors,
  type FeatureMap,
} from '#lib/vision/regional.ts';

/** A random map and its cells times W, as the graph would give them. */
function randomMap(rows: number, cols: number, projection: Projection, random: () => number): FeatureMap {
  const { inDim, outDim, matrix } = projection;
  const data = Float32Array.from({ length: rows * cols * inDim }, random);
  const projected = new Float32Array(rows * cols * outDim);
  for (let cell = 0; cell < rows * cols; cell += 1)
    for (let o = 0; o < outDim; o += 1)
      for (let k = 0; k < inDim; k += 1)
        projected[cell * outDim + o]! += matrix[o * inDim + k]! * data[cell * inDim + k]!;
  return { rows, cols, channels: inDim, data, projected };
}

function randomProjection(inDim: number, outDim: number, random: () => number): Projection {
  return {
    inDim,
    outDim,
    mean: Float32Array.from({ length: inDim }, () => random() * 0.2),
    matrix: Float32Array.from({ length: inDim * outDim }, () => random() * 2 - 1),
    version: 'test',
  };
}

/** The definition the summed-area shortcut must agree with: pool the window, normalise, project. */
function pooledThenProjected(
  map: FeatureMap,
  projection: Projection,
  top: number,
  left: number,
  height: number,
  width: number,
): Float32Array {
  const pooled = new Float32Array(map.channels);
  for (let r = top; r < top + height; r += 1)
    for (let c = left; c < left + width; c += 1)
      for (let k = 0; k < map.channels; k += 1)
        pooled[k]! += map.data[(r * map.cols + c) * map.channels + k]!;
  const norm = Math.hypot(...pooled);
  return applyProjection(
    projection,
    pooled.map((v) => v / norm),
  );
}

describe('regionalVectors', () => {
  it('equals pooling each window, normalising and projecting it, in side/row/column order', () => {
    // Prepare: an 11×14 map, the size of a 640×480 photo's pass
    const random = seededRandom(7);
    const projection = randomProjection(12, 5, random);
    const map = randomMap(11, 14, projection, random);
    // Act
    const vectors = regionalVectors(map, projection);
    // Assess: windows every 2 cells plus one flush with the far edge. 3 cells: rows 0,2,4,6,8 × columns
    // 0,2,…,10,11 (35); 5 cells: rows 0,2,4,6 × columns 0,2,4,6,8,9 (24); 7 cells: rows 0,2,4 × columns
    // 0,2,4,6,7 (15); and the whole map
    expect(vectors).toHaveLength(35 + 24 + 15 + 1);
    const expected: { index: number; window: [number, number, number, number] }[] = [
      { index: 0, window: [0, 0, 3, 3] },
      { index: 6, window: [0, 11, 3, 3] },
      { index: 8, window: [2, 2, 3, 3] },
      { index: 34, window: [8, 11, 3, 3] },
      { index: 35, window: [0, 0, 5, 5] },
      { index: 35 + 23, window: [6, 9, 5, 5] },
      { index: 35 + 24 + 6, window: [2, 2, 7, 7] },
      { index: 74, window: [0, 0, 11, 14] },
    ];
    for (const { index, window } of expected) {
      const want = pooledThenProjected(map, projection, ...window);
      const got = vectors[index]!;
      for (let o = 0; o < 5; o += 1) expect(got[o]).toBeCloseTo(want[o]!, 5);
    }
    for (const vector of vectors) expect(Math.hypot(...vector)).toBeCloseTo(1, 5);
  });

  it('clips windows to a small map and pools each distinct window once', () => {
    const random = seededRandom(11);
    const projection = randomProjection(6, 3, random);
    const map = randomMap(2, 4, projection, random);
    // 3-cell windows clip to 2 rows × 3 columns (columns 0 and 1); 5, 7 and the whole map are all 2×4
    const vectors = regionalVectors(map, projection);
    expect(vectors).toHaveLength(3);
    const whole = pooledThenProjected(map, projection, 0, 0, 2, 4);
    for (let o = 0; o < 3; o += 1) expect(vectors[2]![o]).toBeCloseTo(whole[o]!, 5);
  });

  it('gives a zero vector for an all-zero window and rejects maps that do not fit the projection', () => {
    const projection = randomProjection(4, 2, seededRandom(1));
    const zero = {
      rows: 3,
      cols: 3,
      channels: 4,
      data: new Float32Array(36),
      projected: new Float32Array(18),
    };
    expect([...regionalVectors(zero, projection)[0]!]).toEqual([0, 0]);
    expect(() => regionalVectors({ ...zero, channels: 5, data: new Float32Array(45) }, projection)).toThrow(
      RangeError,
    );
    expect(() => regionalVectors({ ...zero, projected: new Float32Array(9) }, projection)).toThrow(
      RangeError,
    );
  });
});

describe('regionalRasterSize', () => {
  it('puts the long side at 448 and rounds both sides to whole 32-px cells', () => {
    expect(regionalRasterSize(640, 480)).toEqual({ width: 448, height: 352 });
    expect(regionalRasterSize(3000, 4000)).toEqual({ width: 352, height: 448 });
    expect(regionalRasterSize(200, 200)).toEqual({ width: 448, height: 448 });
    // A thin strip keeps a minimum of three cells across
    expect(regionalRasterSize(100, 2000)).toEqual({ width: 96, height: 448 });
  });
});

describe('projectionInput', () => {
  it('is the projection matrix transposed to channels × outputs', () => {
    const projection = randomProjection(3, 2, seededRandom(2));
    const input = projectionInput(projection);
    for (let o = 0; o < 2; o += 1)
      for (let k = 0; k < 3; k += 1) expect(input[k * 2 + o]).toBe(projection.matrix[o * 3 + k]);
  });
});
