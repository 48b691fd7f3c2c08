import { DomainError, type ErrorCode, type ErrorDetail } from '#lib/domain/errors.ts';
import { escapeHidden } from '#lib/domain/validation.ts';

/** The one mapping from error codes to HTTP statuses. */
export const STATUS_OF: Record<ErrorCode, number> = {
  invalid_request: 400,
  missing_search_id: 401,
  invalid_search_id: 401,
  unauthorized: 401,
  domain_not_allowed: 403,
  search_id_revoked: 403,
  not_found: 404,
  feed_not_found: 404,
  product_not_found: 404,
  import_not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  precondition_failed: 412,
  idempotency_key_in_use: 409,
  idempotency_key_reused: 422,
  payload_too_large: 413,
  unsupported_media_type: 415,
  invalid_image: 422,
  rate_limited: 429,
  internal: 500,
  unavailable: 503,
};

/**
 * The challenge a 401 carries in WWW-Authenticate (RFC 9110 §11.6.1 asks every 401 for one): RFC 6750's
 * Bearer scheme, with `invalid_token` for a search id that is not known. The admin API's 401s have one
 * where it takes a token (local mode); in AWS its callers sign with IAM and its 401s are the gateway's.
 */
export function authenticationChallenge(code: ErrorCode, adminToken: boolean): string | undefined {
  if (code === 'missing_search_id') return 'Bearer realm="search"';
  if (code === 'invalid_search_id') return 'Bearer realm="search", error="invalid_token"';
  if (code === 'unauthorized' && adminToken) return 'Bearer realm="admin"';
  return undefined;
}

export interface ErrorBody {
  error: { status: number; code: ErrorCode; message: string; details: ErrorDetail[] };
  requestId: string;
}

interface HttpErrorLike {
  statusCode: number;
  message: string;
  cause?: { package?: string };
}

/** AWS SDK and socket errors that mean a dependency is down or throttling: retryable, so 503. */
const DEPENDENCY_DOWN = new Set([
  'ThrottlingException',
  'ProvisionedThroughputExceededException',
  'RequestLimitExceeded',
  'ServiceUnavailable',
  'ServiceUnavailableException',
  'InternalServerError',
  'TimeoutError',
  'SlowDown',
]);
const SOCKET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN']);

function isDependencyDown(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  const retryable = (error as { $retryable?: unknown }).$retryable;
  return (
    DEPENDENCY_DOWN.has(error.name) ||
    (typeof code === 'string' && SOCKET_ERRORS.has(code)) ||
    Boolean(retryable)
  );
}

function isMiddyTimeout(error: unknown): boolean {
  return (
    error instanceof Error &&
    error.name === 'TimeoutError' &&
    (error.cause as { package?: unknown } | undefined)?.package === '@middy/core'
  );
}

function isHttpErrorLike(error: unknown): error is HttpErrorLike {
  return error instanceof Error && typeof (error as { statusCode?: unknown }).statusCode === 'number';
}

/**
 * Turns anything thrown into the DESIGN §3 error body. Messages are shown for domain errors and for
 * middy's client errors only; anything else becomes a bare 500 so no internals leak.
 */
export function toErrorBody(error: unknown, requestId: string): ErrorBody {
  const body = (code: ErrorCode, message: string, details: ErrorDetail[] = []): ErrorBody => ({
    error: {
      status: STATUS_OF[code],
      code,
      message: escapeHidden(message),
      details: details.map((detail) => ({
        ...detail,
        path: escapeHidden(detail.path),
        message: escapeHidden(detail.message),
      })),
    },
    requestId,
  });
  if (error instanceof DomainError) return body(error.code, error.message, error.details);
  if (isHttpErrorLike(error) && error.cause?.package === '@middy/http-json-body-parser') {
    // middy answers 415 for both a wrong Content-Type and malformed JSON; only the first is a media-type error.
    if (error.message === 'Unsupported Media Type') {
      return body(
        'unsupported_media_type',
        'Send the request body as JSON with Content-Type: application/json.',
      );
    }
    return body('invalid_request', 'Request body is not valid JSON.');
  }
  // The function's own deadline (middy's early timeout), not a dependency: say so.
  if (isMiddyTimeout(error))
    return body(
      'unavailable',
      'The request took longer than the service allows. Retry later, or send a smaller image.',
    );
  if (isDependencyDown(error))
    return body('unavailable', 'A dependency is temporarily unavailable. Retry later.');
  return body(
    'internal',
    'Internal error. Retry later; if it persists, contact support with the request id.',
  );
}
