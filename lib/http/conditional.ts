import { ValidationError } from '#lib/domain/errors.ts';
import type { JsonEvent } from '#lib/http/middleware.ts';

/** One entity tag of an If-Match list (RFC 9110 §8.8.3): `"opaque"` or weak `W/"opaque"`. */
const ENTITY_TAG = /^(W\/)?"[\x21\x23-\x7e\x80-\xff]*"$/;

/**
 * The strong entity tags an If-Match header accepts (RFC 9110 §13.1.1), or undefined for none or `*`
 * (any current representation: the route's own 404 covers a missing one). A weak tag never matches in the
 * strong comparison If-Match uses, so it is dropped: a list of weak tags only is a 412. A value that is not
 * a list of entity tags (`abc`, unquoted) is a 400, not a silent match or mismatch.
 */
export function ifMatchTags(header: string | undefined): string[] | undefined {
  if (header === undefined || header.trim() === '*') return undefined;
  const tags = header
    .split(',')
    .map((tag) => tag.trim())
    .filter((tag) => tag !== '');
  if (tags.length === 0 || !tags.every((tag) => ENTITY_TAG.test(tag))) {
    throw new ValidationError(
      'Invalid If-Match: expected * or a list of quoted entity tags (the ETag sent).',
      [{ path: 'If-Match', message: 'expected * or quoted entity tags' }],
    );
  }
  return tags.filter((tag) => !tag.startsWith('W/'));
}

/**
 * The request's If-Match tags (ifMatchTags), every header line of it: a list may come on several lines
 * (RFC 9110 §5.3), which `headers` (the gateway's and the local server's) reduces to the last one.
 */
export function ifMatchOf(event: JsonEvent): string[] | undefined {
  const lines = Object.entries(event.multiValueHeaders ?? {})
    .filter(([name]) => name.toLowerCase() === 'if-match')
    .flatMap(([, values]) => values ?? []);
  return ifMatchTags(lines.length > 0 ? lines.join(', ') : event.headers['if-match']);
}
