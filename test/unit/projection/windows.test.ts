import { describe, expect, it } from 'vitest';
import { coveringWindow, pooledWindow, windowFeatures } from '#layers/projection/windows.ts';
import { splitRows, trainProjection } from '#layers/projection/train.ts';
import { PROJECTION_RECIPE } from '#layers/projection/recipe.ts';
import type { FeatureMap } from '#lib/vision/regional.ts';

/** A map whose cell (r, c) holds channel values [r, c, 1]. */
function gridMap(rows: number, cols: number): FeatureMap {
  const channels = 3;
  const data = new Float32Array(rows * cols * channels);
  for (let r = 0; r < rows; r += 1)
    for (let c = 0; c < cols; c += 1) data.set([r, c, 1], (r * cols + c) * channels);
  return { rows, cols, channels, data, projected: new Float32Array(0) };
}

describe('window views of the training objects', () => {
  it('picks the regional window that best covers the pasted box', () => {
    // A 640×480 view → an 11×14 map (cells of ~45.7 × 43.6 px); the box covers cells 4–8 × 6–10
    const window = coveringWindow(11, 14, { left: 275, top: 175, width: 228, height: 218 }, 640, 480);
    expect(window).toEqual({ top: 4, left: 6, height: 5, width: 5 });
  });

  it('takes a small window for a small box and the whole map for a box that fills the view', () => {
    expect(coveringWindow(11, 14, { left: 0, top: 0, width: 130, height: 130 }, 640, 480)).toEqual({
      top: 0,
      left: 0,
      height: 3,
      width: 3,
    });
    expect(coveringWindow(11, 14, { left: 0, top: 0, width: 640, height: 480 }, 640, 480)).toEqual({
      top: 0,
      left: 0,
      height: 11,
      width: 14,
    });
  });

  it('pools a window as the L2-normalised sum of its cells', () => {
    // Cells (1..2, 2..4): sums of r = 3·(1+2) = 9, of c = 2·(2+3+4) = 18, of 1 = 6
    const pooled = pooledWindow(gridMap(4, 5), { top: 1, left: 2, height: 2, width: 3 });
    const norm = Math.hypot(9, 18, 6);
    expect(Array.from(pooled)).toEqual([9 / norm, 18 / norm, 6 / norm].map(Math.fround));
  });

  it('reads the feature map of the view it is given and pools its covering window', async () => {
    const map = gridMap(11, 14);
    const seen: Buffer[] = [];
    const source = {
      featureMap: async (image: Buffer) => {
        seen.push(image);
        return { map, width: 640, height: 480 };
      },
    };
    const bytes = Buffer.from('view');
    const features = await windowFeatures(source, bytes, { left: 0, top: 0, width: 130, height: 130 });
    expect(seen).toEqual([bytes]);
    expect(features).toEqual(pooledWindow(map, { top: 0, left: 0, height: 3, width: 3 }));
  });

  it('keeps the window rows out of the projection’s own training', () => {
    // Prepare: one object's packshot, a pasted view and its window row
    const set = {
      dimension: 2,
      features: Float32Array.from([1, 0, 0.8, 0.6, 0.6, 0.8]),
      objects: Int32Array.from([0, 0, 0]),
      kinds: ['packshot', 'scene', 'window'] as ('packshot' | 'scene' | 'window')[],
      objectNames: ['a'],
    };
    // Act
    const [windows, views] = splitRows(set, 'window');
    // Assess
    expect(windows.kinds).toEqual(['window']);
    expect(Array.from(windows.features)).toEqual([0.6, 0.8].map(Math.fround));
    expect(views.kinds).toEqual(['packshot', 'scene']);
    expect(() => trainProjection(set, PROJECTION_RECIPE.train)).toThrow(/view rows only/);
  });
});
