/**
 * The committed training features' file format (layers/projection/recipe.ts): int16 multiples of 2^-12
 * with a JSON header, brotli-compressed. The re-training test trusts a round trip to be exact, since the
 * features' sha256 in the weights' manifest is computed on the extracted floats.
 */
import { describe, expect, it } from 'vitest';
import { QUANTUM, quantise, type FeatureSet } from '#layers/projection/features.ts';
import { decodeFeatures, encodeFeatures, featuresSha256 } from '#layers/projection/recipe.ts';
import { seededRandom } from '#layers/projection/views.ts';

function featureSet(values: number[], dimension: number): FeatureSet {
  const rows = values.length / dimension;
  return {
    dimension,
    features: Float32Array.from(values),
    objects: Int32Array.from({ length: rows }, (_, row) => Math.floor(row / 2)),
    kinds: Array.from({ length: rows }, (_, row) => (row % 2 === 0 ? 'packshot' : 'scene')),
    objectNames: Array.from({ length: Math.ceil(rows / 2) }, (_, i) => `object-${i}`),
  };
}

describe('committed training features', () => {
  it('round-trips quantised features exactly, with their header and key', () => {
    const random = seededRandom(3);
    const set = featureSet(
      Array.from({ length: 6 * 448 }, () => quantise((random() * 2 - 1) * 0.3)),
      448,
    );
    const { set: decoded, key } = decodeFeatures(encodeFeatures(set, 'abc123'));
    expect(key).toBe('abc123');
    expect(decoded).toEqual(set);
    expect(featuresSha256(decoded)).toBe(featuresSha256(set));
  });

  it('stores the extremes of the int16 range, and quantise never yields -0 (but keeps NaN)', () => {
    const set = featureSet([0x7fff / QUANTUM, -0x7fff / QUANTUM, quantise(-1e-5), 0], 2);
    expect(Object.is(set.features[2], 0)).toBe(true);
    expect(quantise(Number.NaN)).toBeNaN();
    const { set: decoded } = decodeFeatures(encodeFeatures(set, 'k'));
    expect(Array.from(decoded.features)).toEqual(Array.from(set.features));
    expect(featuresSha256(decoded)).toBe(featuresSha256(set));
  });

  it('refuses values it could not store exactly', () => {
    expect(() => encodeFeatures(featureSet([0.1, 0], 2), 'k')).toThrow(/not a multiple of 2\^-12/);
    expect(() => encodeFeatures(featureSet([9, 0], 2), 'k')).toThrow(/outside the int16 range/);
    expect(() => encodeFeatures(featureSet([Number.NaN, 0], 2), 'k')).toThrow(/not a multiple/);
    expect(() => encodeFeatures(featureSet([-0, 0], 2), 'k')).toThrow(/-0/);
  });
});
