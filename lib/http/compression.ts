/**
 * Response compression. The gateway compresses an answer of at least this many bytes for a client that
 * accepts it (the REST APIs' minCompressionSize, infra/stacks/api-stack.ts), and the local server does
 * the same with gzip: a page of 17 related products with their variants measured 29 KB of JSON and 3.7
 * KB gzipped (browser audit, 2026-11-27), which a phone on a slow network feels.
 */
export const COMPRESSION_MIN_BYTES = 1024;

/**
 * True when an Accept-Encoding header (RFC 9110 §12.5.3) accepts gzip: listed (or `x-gzip`), or else
 * covered by `*`, with a weight above 0. A weight that is not a number counts as 0.
 */
export function acceptsGzip(header: string | undefined): boolean {
  if (!header) return false;
  let gzip: number | undefined;
  let any: number | undefined;
  for (const part of header.split(',')) {
    const [coding = '', ...parameters] = part.split(';').map((text) => text.trim());
    const weight = parameters.find((parameter) => /^q\s*=/i.test(parameter));
    const q = weight === undefined ? 1 : Number(weight.slice(weight.indexOf('=') + 1).trim() || 'x');
    const quality = Number.isFinite(q) ? q : 0;
    const name = coding.toLowerCase();
    if (name === 'gzip' || name === 'x-gzip') gzip = Math.max(gzip ?? 0, quality);
    else if (name === '*') any = quality;
  }
  return (gzip ?? any ?? 0) > 0;
}
