import { describe, expect, it } from 'vitest';
import { extractionSize } from '#lib/vision/local-features/extract.ts';

describe('extractionSize', () => {
  it('brings a small image up to a 256-px short side', () => {
    // Act / Assess
    expect(extractionSize(124, 150, { role: 'catalogue' })).toEqual({ width: 256, height: 310 });
    expect(extractionSize(200, 100, { role: 'query' })).toEqual({ width: 512, height: 256 });
  });

  it('brings a large image down to a 640-px long side', () => {
    // Act / Assess
    expect(extractionSize(4000, 3000, { role: 'query' })).toEqual({ width: 640, height: 480 });
    expect(extractionSize(1000, 2000, { role: 'catalogue', maxSide: 500 })).toEqual({
      width: 256,
      height: 512,
    });
  });

  it('leaves an image inside the bounds at its size', () => {
    // Act / Assess
    expect(extractionSize(600, 400, { role: 'catalogue' })).toEqual({ width: 600, height: 400 });
  });

  it('never upscales past 1024 px, whatever the aspect ratio', () => {
    // Act / Assess: a 2000×100 banner would need 5120 px to reach a 256-px short side; it gets the
    // 1024-px limit instead of the 640-px query bound, keeping its thin side as large as allowed
    expect(extractionSize(2000, 100, { role: 'catalogue' })).toEqual({ width: 1024, height: 51 });
    expect(extractionSize(800, 100, { role: 'catalogue' })).toEqual({ width: 1024, height: 128 });
  });
});
