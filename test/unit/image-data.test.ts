import { describe, expect, it } from 'vitest';
import { decodeImageData, isBase64Image } from '#lib/domain/image-data.ts';

describe('image data', () => {
  const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0xfb, 0xff, 0x00]);

  it('decodes standard and URL-safe base64, with or without a data: URL prefix', () => {
    expect(decodeImageData(bytes.toString('base64')).equals(bytes)).toBe(true);
    expect(decodeImageData(bytes.toString('base64url')).equals(bytes)).toBe(true);
    expect(decodeImageData(`data:image/png;base64,${bytes.toString('base64')}`).equals(bytes)).toBe(true);
  });

  it.each([
    'data:;base64,',
    'data:image/jpeg;name=photo.jpg;base64,',
    'data:image/jpeg;name="my photo.jpg";charset=x;base64,',
    ' \ndata:image/png;base64,',
    'DATA:IMAGE/PNG;BASE64,',
  ])('accepts the data: URL head %j (RFC 2397)', (head) => {
    expect(decodeImageData(`${head}${bytes.toString('base64')}`).equals(bytes)).toBe(true);
  });

  it('refuses a body of endless data: URL parameters without overflowing the stack', () => {
    for (const value of [`data:a/b${';a="'.repeat(1_000_000)}`, `data:a/b${';a=b'.repeat(1_500_000)}`])
      expect(isBase64Image(value)).toBe(false);
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
