/**
 * Response headers a browser may read on a cross-origin answer beyond the safelisted ones: the request id
 * (to report a problem), the rate-limit state and when to retry. Every answer that names an origin names
 * these too, the handlers' (corsHeaders) and the local server's own errors (lib/local/server.ts).
 */
export const EXPOSED_HEADERS = 'RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset,Retry-After,X-Request-Id';

/**
 * Shop pages call the API from the browser, so every answer (errors included, or the browser hides them)
 * names the calling origin. Which origins may use a search id is the domain check's job, not CORS's.
 */
export function corsHeaders(origin: string | undefined): Record<string, string> {
  if (!origin) return {};
  return {
    'Access-Control-Allow-Origin': origin,
    'Access-Control-Expose-Headers': EXPOSED_HEADERS,
    Vary: 'Origin',
  };
}
