import { describe, expect, it } from 'vitest';
import { answerCoding, COMPRESSION_MIN_BYTES, contentCoding } from '#lib/http/compression.ts';

describe('contentCoding', () => {
  it.each([
    ['gzip', 'gzip'],
    ['GZIP', 'gzip'],
    ['x-gzip', 'gzip'],
    ['gzip;q=0.5', 'gzip'],
    ['gzip; q=0.001', 'gzip'],
    ['deflate', 'deflate'],
    // Browsers' headers: every coding weighs 1, gzip among them
    ['gzip, deflate, br', 'gzip'],
    ['gzip, deflate, br, zstd', 'gzip'],
    ['br, gzip, deflate', 'gzip'],
    ['deflate, gzip', 'gzip'],
    ['deflate;q=0.5,gzip;q=1.0', 'gzip'],
    ['gzip;q=0.5, deflate', 'deflate'],
    ['gzip;q=1.0,identity;q=0.5,*;q=0', 'gzip'],
    ['gzip, identity', 'gzip'],
    ['*;q=0, gzip;q=0.2', 'gzip'],
    ['identity;q=0, gzip;q=0.5', 'gzip'],
  ])('%s → %s', (header, coding) => {
    expect(contentCoding(header)).toBe(coding);
  });

  it.each([
    // The client prefers a coding the gateway does not produce: it answers uncompressed
    'br, gzip;q=0.8',
    'zstd, br;q=0.9, gzip;q=0.8',
    'br;q=1, *;q=0.5',
    // ... or identity
    'identity, gzip;q=0.5',
    // Not acceptable (a weight of 0, or not a number)
    'gzip;q=0',
    'gzip;Q=0',
    'gzip;q=none',
    'gzip;q=0, *',
    'gzip;q=0, deflate;q=0, identity;q=0',
    // No coding named: no header, an empty one, `*` alone or above the named ones
    '*',
    '*, gzip;q=0.5',
    'br, deflate;q=0',
    'identity',
    '',
    ' , ',
    undefined,
  ])('%j → not compressed', (header) => {
    expect(contentCoding(header)).toBeUndefined();
  });
});

describe('answerCoding', () => {
  it("compresses from COMPRESSION_MIN_BYTES, with contentCoding's choice", () => {
    expect(answerCoding(COMPRESSION_MIN_BYTES, 'gzip, deflate, br')).toBe('gzip');
    expect(answerCoding(COMPRESSION_MIN_BYTES - 1, 'gzip, deflate, br')).toBeUndefined();
    expect(answerCoding(COMPRESSION_MIN_BYTES, 'deflate, gzip;q=0.5')).toBe('deflate');
    expect(answerCoding(COMPRESSION_MIN_BYTES * 10, 'br, gzip;q=0.8')).toBeUndefined();
    expect(answerCoding(COMPRESSION_MIN_BYTES * 10, undefined)).toBeUndefined();
  });
});
