/**
 * Response headers a browser may read on a cross-origin answer beyond the safelisted ones: the request id
 * (to report a problem), the rate-limit state and when to retry. Every answer that names an origin names
 * these too, the handlers' (corsHeaders) and the local server's own errors (lib/local/server.ts).
 */
export const EXPOSED_HEADERS = 'RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset,Retry-After,X-Request-Id';

/**
 * Request headers a browser may send, as the preflight answers them (locally and at the gateway): the
 * search id and JSON, and the headers that monitoring and HTTP libraries add to a page's requests (W3C
 * Trace Context and baggage, Sentry, B3/Zipkin, Datadog, Elastic APM's pre-W3C header, Jaeger, Apache
 * SkyWalking's sw8 protocol, AWS X-Ray, New Relic, X-Requested-With). A header outside the list fails
 * the preflight, and the browser then refuses every search with an opaque network error: turning on a
 * page's trace propagation would break the search. Only the first two are read. Headers named per key
 * (Jaeger's `uberctx-<key>` baggage) cannot be listed: a preflight's answer names headers, not patterns.
 */
export const ALLOWED_REQUEST_HEADERS = [
  'Authorization',
  'Content-Type',
  'X-Requested-With',
  'traceparent',
  'tracestate',
  'baggage',
  'sentry-trace',
  'b3',
  'X-B3-TraceId',
  'X-B3-SpanId',
  'X-B3-ParentSpanId',
  'X-B3-Sampled',
  'X-B3-Flags',
  'x-datadog-trace-id',
  'x-datadog-parent-id',
  'x-datadog-origin',
  'x-datadog-sampling-priority',
  'x-datadog-tags',
  'elastic-apm-traceparent',
  'uber-trace-id',
  'sw8',
  'sw8-correlation',
  'sw8-x',
  'X-Amzn-Trace-Id',
  'newrelic',
];

/** Methods a preflight allows, locally and at the gateway: every public route is a POST. */
export const PREFLIGHT_METHODS = ['POST', 'OPTIONS'];

/** How long a browser may keep a preflight's answer: two hours, Chromium's cap (Firefox keeps a day). */
export const PREFLIGHT_MAX_AGE_SECONDS = 7200;

/**
 * What every handler answer depends on besides its method and URL, sent on each (lib/http/middleware.ts):
 * the request's Origin, which corsHeaders names (or nothing, without one), and its Accept-Encoding, by
 * which the gateway or the local server compresses it (lib/http/compression.ts). A cache keys a stored
 * answer only on what that answer's Vary names, so an answer without an Origin, or one left uncompressed,
 * must name both too: else a shared cache gives it to the next browser (no allow-origin header: the page
 * cannot read it) or to a client that asked for gzip, and a gzipped one to a client that cannot read gzip.
 */
export const VARY = 'Origin, Accept-Encoding';

/**
 * Shop pages call the API from the browser, so every answer (errors included, or the browser hides them)
 * names the calling origin. Which origins may use a search id is the domain check's job, not CORS's.
 */
export function corsHeaders(origin: string | undefined): Record<string, string> {
  if (!origin) return {};
  return { 'Access-Control-Allow-Origin': origin, 'Access-Control-Expose-Headers': EXPOSED_HEADERS };
}
