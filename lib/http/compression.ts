/**
 * Response compression. The gateway compresses an answer of at least this many bytes for a client that
 * accepts it (the REST APIs' minCompressionSize, infra/stacks/api-stack.ts), and the local server does
 * the same (contentCoding): a page of 17 related products with their variants measured 29 KB of JSON and
 * 3.7 KB gzipped (browser audit, 2026-11-27), which a phone on a slow network feels.
 */
export const COMPRESSION_MIN_BYTES = 1024;

/**
 * The codings API Gateway compresses with besides identity (its developer guide, "Content codings supported
 * by API Gateway"), gzip first: the one taken when a client weighs both alike, as browsers send
 * `gzip, deflate, br` (RFC 9110 §12.5.3 leaves the choice among equal weights to the server).
 */
export const CONTENT_CODINGS = ['gzip', 'deflate'] as const;
export type ContentCoding = (typeof CONTENT_CODINGS)[number];

/**
 * The coding an answer is compressed with for a request's Accept-Encoding, as API Gateway documents its
 * choice: a coding it supports, named with the highest weight the header gives ("The highest-priority
 * content encoding must be one supported by API Gateway. If it is not, compression is not applied"); a
 * tie with another coding or identity compresses (the server's choice, in RFC 9110). Undefined, so the
 * answer goes as it is, when the client
 * prefers a coding the gateway lacks (`br, gzip;q=0.8`) or identity, weighs every coding 0 (`gzip;q=0`
 * is "not acceptable"), or names none: no header, an empty one, `*` alone ("Without an explicit
 * specification of supported Accept-Encoding header values, API Gateway does not compress the payload").
 * `*` still counts as a weight: `*, gzip;q=0.5` prefers some other coding. Where the guide says nothing,
 * RFC 9110 decides: `x-gzip` is gzip (§8.4.1.3), and an answer none of whose codings is acceptable goes
 * without one (§12.5.3). A weight that is not a number counts as 0.
 */
export function contentCoding(header: string | undefined): ContentCoding | undefined {
  const weights = new Map<string, number>();
  for (const part of (header ?? '').split(',')) {
    const [coding = '', ...parameters] = part.split(';').map((text) => text.trim());
    if (!coding) continue;
    const weight = parameters.find((parameter) => /^q\s*=/i.test(parameter));
    const q = weight === undefined ? 1 : Number(weight.slice(weight.indexOf('=') + 1).trim() || 'x');
    const name = coding.toLowerCase() === 'x-gzip' ? 'gzip' : coding.toLowerCase();
    weights.set(name, Math.max(weights.get(name) ?? 0, Number.isFinite(q) ? q : 0));
  }
  const highest = Math.max(0, ...weights.values());
  if (highest === 0) return undefined;
  return CONTENT_CODINGS.find((coding) => weights.get(coding) === highest);
}

/**
 * The coding an answer of `bytes` bytes gets for a request's Accept-Encoding: contentCoding's, from
 * COMPRESSION_MIN_BYTES. The local server compresses with it; the middleware names it on a HEAD answer,
 * whose body it drops before the gateway or the local server could measure it (lib/http/middleware.ts).
 */
export function answerCoding(bytes: number, acceptEncoding: string | undefined): ContentCoding | undefined {
  return bytes >= COMPRESSION_MIN_BYTES ? contentCoding(acceptEncoding) : undefined;
}
