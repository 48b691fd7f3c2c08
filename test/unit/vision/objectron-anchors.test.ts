import { describe, expect, it } from 'vitest';
import { ssdAnchors } from '../../../eval/objectron-detector.ts';

describe("Objectron's SSD anchors", () => {
  it('lays out the 1,917 anchors of the model: 3 per cell on the 19×19 layer, 6 per cell on the five others', () => {
    // Act
    const anchors = ssdAnchors();

    // Assert: the model's box and class outputs are [1, 1917, ·], concatenated layer by layer.
    expect(anchors).toHaveLength(19 * 19 * 3 + 10 * 10 * 6 + 5 * 5 * 6 + 3 * 3 * 6 + 2 * 2 * 6 + 1 * 1 * 6);
    expect(anchors).toHaveLength(1917);
    // The first cell of the lowest layer: scale 0.1 square, then scale 0.2 at aspect ratios 2 and 0.5.
    const [square, wide, tall] = anchors;
    expect(square).toEqual({ xCenter: 0.5 / 19, yCenter: 0.5 / 19, width: 0.1, height: 0.1 });
    expect(wide!.width).toBeCloseTo(0.2 * Math.SQRT2, 6);
    expect(wide!.height).toBeCloseTo(0.2 / Math.SQRT2, 6);
    expect(tall!.width).toBeCloseTo(0.2 / Math.SQRT2, 6);
    // The last layer (one cell): scale 0.95 at five ratios, then the interpolated sqrt(0.95 · 1) square.
    const last = anchors.slice(-6);
    expect(last.map((a) => a.xCenter)).toEqual(Array(6).fill(0.5));
    expect(last[0]!.width).toBeCloseTo(0.95, 6);
    expect(last[5]!.width).toBeCloseTo(Math.sqrt(0.95), 6);
    // The second layer's cells step by a tenth, x fastest.
    const second = anchors.slice(19 * 19 * 3, 19 * 19 * 3 + 12);
    expect(second[6]!.xCenter).toBeCloseTo(1.5 / 10, 6);
    expect(second[6]!.yCenter).toBeCloseTo(0.5 / 10, 6);
    expect(second[0]!.width).toBeCloseTo(0.35, 6);
  });
});
