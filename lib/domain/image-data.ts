import { ValidationError } from '#lib/domain/errors.ts';

const DATA_URL_PREFIX = /^data:[\w/+.-]+(;[\w-]+=[\w-]+)*;base64,/i;
const BASE64 = /^[A-Za-z0-9+/_-]+={0,2}$/;

/** True when the string is base64 (standard or URL-safe alphabet), optionally a `data:` URL. */
export function isBase64Image(value: string): boolean {
  const payload = value.replace(DATA_URL_PREFIX, '').replace(/\s+/g, '');
  return payload.length >= 4 && BASE64.test(payload) && payload.replace(/=+$/, '').length % 4 !== 1;
}

/** Decodes a base64 image field (a `data:` URL prefix is accepted) into bytes. */
export function decodeImageData(value: string, field = 'imageData'): Buffer {
  if (!isBase64Image(value)) {
    throw new ValidationError(`Invalid ${field}: expected a base64-encoded image.`, [
      { path: field, message: 'expected a base64-encoded image' },
    ]);
  }
  const payload = value.replace(DATA_URL_PREFIX, '').replace(/\s+/g, '');
  return Buffer.from(payload, payload.includes('-') || payload.includes('_') ? 'base64url' : 'base64');
}
