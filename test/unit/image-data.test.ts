import { describe, expect, it } from 'vitest';
import { decodeImageData, isBase64Image } from '#lib/domain/image-data.ts';

describe('image data', () => {
  const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0xfb, 0xff, 0x00]);

  it('decodes standard and URL-safe base64, with or without a data: URL prefix', () => {
    expect(decodeImageData(bytes.toString('base64')).equals(bytes)).toBe(true);
    expect(decodeImageData(bytes.toString('base64url')).equals(bytes)).toBe(true);
    expect(decodeImageData(`data:image/png;base64,${bytes.toString('base64')}`).equals(bytes)).toBe(true);
  });

  it('tolerates line breaks inside the base64', () => {
    const wrapped = bytes.toString('base64').replace(/(.{4})/g, '$1\n');
    expect(decodeImageData(wrapped).equals(bytes)).toBe(true);
  });

  it.each(['', 'abc', 'not base64!!', 'a'.repeat(5), '====', 'data:image/png;base64,'])(
    'rejects %j',
    (value) => {
      expect(isBase64Image(value)).toBe(false);
      expect(() => decodeImageData(value)).toThrow(/base64/);
    },
  );
});
