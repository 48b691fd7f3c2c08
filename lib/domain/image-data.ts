import { ValidationError } from '#lib/domain/errors.ts';

/**
 * A `data:` URL's head as RFC 2397 allows it: the media type may be left out (`data:;base64,`) and a
 * parameter's value may be any token or quoted string (`;name=photo.jpg`); leading whitespace is
 * ignored, as it is before plain base64. Looked for in the value's first DATA_URL_HEAD_CHARS only, with
 * a bounded number of parameters: the regex engine recursed per parameter, and a 6 MB body of `;a="`
 * overflowed its stack.
 */
const DATA_URL_PREFIX =
  /^\s*data:([\w!#$&^.+-]+\/[\w!#$&^.+-]+)?(;[\w!#$&^.+-]+=("[^"]*"|[^;,"\s]*)){0,16};base64,/i;
const DATA_URL_HEAD_CHARS = 2048;

/** The value without its `data:` URL head, if it has one. */
function payloadOf(value: string): string {
  const head = DATA_URL_PREFIX.exec(value.slice(0, DATA_URL_HEAD_CHARS));
  return (head ? value.slice(head[0].length) : value).replace(/\s+/g, '');
}

const BASE64 = /^[A-Za-z0-9+/_-]+={0,2}$/;

/** True when the string is base64 (standard or URL-safe alphabet), optionally a `data:` URL. */
export function isBase64Image(value: string): boolean {
  const payload = payloadOf(value);
  return payload.length >= 4 && BASE64.test(payload) && payload.replace(/=+$/, '').length % 4 !== 1;
}

/** Decodes a base64 image field (a `data:` URL prefix is accepted) into bytes. */
export function decodeImageData(value: string, field = 'imageData'): Buffer {
  if (!isBase64Image(value)) {
    throw new ValidationError(`Invalid ${field}: expected a base64-encoded image.`, [
      { path: field, message: 'expected a base64-encoded image' },
    ]);
  }
  const payload = payloadOf(value);
  return Buffer.from(payload, payload.includes('-') || payload.includes('_') ? 'base64url' : 'base64');
}
