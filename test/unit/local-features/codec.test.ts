import { describe, expect, it } from 'vitest';
import { decodeFeatures, encodeFeatures, FeatureFormatError } from '#lib/vision/local-features/codec.ts';
import type { FeatureSet, LocalFeatures } from '#lib/vision/local-features/types.ts';
import { randomDescriptors, seededWords } from './descriptors.ts';

function featureSet(count: number, seed: number): FeatureSet {
  const next = seededWords(seed);
  const points = new Float32Array(2 * count);
  for (let i = 0; i < points.length; i++) points[i] = (next() % 2560) / 4;
  return { width: 640, height: 480, points, descriptors: randomDescriptors(count, next) };
}

describe('encodeFeatures / decodeFeatures', () => {
  it('round-trips both orientations exactly', () => {
    // Prepare
    const features: LocalFeatures = { original: featureSet(300, 1), mirrored: featureSet(280, 2) };
    // Act
    const bytes = encodeFeatures(features);
    const decoded = decodeFeatures(bytes);
    // Assess
    expect(decoded).toEqual(features);
    expect(bytes.length).toBe(8 + 2 * 8 + 580 * 36 + 4);
  });

  it('round-trips a single orientation, an empty set, and an unaligned buffer', () => {
    // Prepare
    const features: LocalFeatures = { original: featureSet(0, 3) };
    const single: LocalFeatures = { original: featureSet(5, 4) };
    const unaligned = Buffer.concat([Buffer.from([0]), encodeFeatures(single)]).subarray(1);
    // Act / Assess
    expect(decodeFeatures(encodeFeatures(features))).toEqual(features);
    expect(decodeFeatures(unaligned)).toEqual(single);
  });

  it('rejects another version, a corrupted byte, a truncated record and foreign bytes', () => {
    // Prepare
    const bytes = encodeFeatures({ original: featureSet(20, 5) });
    const newer = Buffer.from(bytes);
    newer[4] = 2;
    const corrupted = Buffer.from(bytes);
    corrupted[100] = corrupted[100]! ^ 0x10;
    // Act / Assess
    expect(() => decodeFeatures(newer)).toThrow(
      new FeatureFormatError('version 2, this reader understands 1'),
    );
    expect(() => decodeFeatures(corrupted)).toThrow(/checksum mismatch/);
    expect(() => decodeFeatures(bytes.subarray(0, 200))).toThrow(FeatureFormatError);
    expect(() => decodeFeatures(Buffer.from('{"this is": "a JSON document, not features"}'))).toThrow(
      /bad magic/,
    );
    expect(() => decodeFeatures(Buffer.alloc(3))).toThrow(/too short/);
  });

  it('refuses coordinates the format cannot hold', () => {
    // Prepare
    const set = featureSet(2, 6);
    set.points[1] = 20_000;
    // Act / Assess
    expect(() => encodeFeatures({ original: set })).toThrow(RangeError);
  });
});
