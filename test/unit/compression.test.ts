import { describe, expect, it } from 'vitest';
import { acceptsGzip } from '#lib/http/compression.ts';

describe('acceptsGzip', () => {
  it.each([
    ['gzip', true],
    ['br, gzip, deflate', true],
    ['GZIP', true],
    ['x-gzip', true],
    ['gzip;q=0.5', true],
    ['gzip; q=0.001', true],
    ['*', true],
    ['br, *;q=0.1', true],
    ['gzip;q=0, *', false],
    ['*;q=0, gzip;q=0.2', true],
    ['gzip;q=0', false],
    ['gzip;Q=0', false],
    ['gzip;q=none', false],
    ['br, deflate', false],
    ['identity', false],
    ['', false],
    [undefined, false],
  ])('%s → %s', (header, accepted) => {
    expect(acceptsGzip(header)).toBe(accepted);
  });
});
