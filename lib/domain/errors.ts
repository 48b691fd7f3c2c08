/**
 * Domain errors: what went wrong, in the service's vocabulary. They know nothing of HTTP; the one mapping
 * to status codes is lib/http/errors.ts. Messages of these errors are safe to show to clients.
 */
export type ErrorCode =
  | 'invalid_request'
  | 'missing_search_id'
  | 'invalid_search_id'
  | 'unauthorized'
  | 'domain_not_allowed'
  | 'search_id_revoked'
  | 'not_found'
  | 'feed_not_found'
  | 'product_not_found'
  | 'import_not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'precondition_failed'
  | 'idempotency_key_in_use'
  | 'idempotency_key_reused'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'invalid_image'
  | 'rate_limited'
  | 'internal'
  | 'unavailable';

export interface ErrorDetail {
  path: string;
  message: string;
}

export class DomainError extends Error {
  override name = 'DomainError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetail[] = [],
  ) {
    super(message);
  }
}

export class ValidationError extends DomainError {
  override name = 'ValidationError';
  constructor(message: string, details: ErrorDetail[] = []) {
    super('invalid_request', message, details);
  }
}

export class InvalidImageError extends DomainError {
  override name = 'InvalidImageError';
  constructor(message: string) {
    super('invalid_image', message);
  }
}

export class NotFoundError extends DomainError {
  override name = 'NotFoundError';
  constructor(
    code: 'not_found' | 'feed_not_found' | 'product_not_found' | 'import_not_found',
    message: string,
  ) {
    super(code, message);
  }
}

/** Rate limit exhausted; carries what the client needs to back off. */
export class RateLimitedError extends DomainError {
  override name = 'RateLimitedError';
  constructor(readonly retryAfterSeconds: number) {
    super('rate_limited', `Hourly request limit of the plan exceeded. Retry in ${retryAfterSeconds} s.`);
  }
}

/** A dependency (model, store) cannot serve now; retryable. */
export class UnavailableError extends DomainError {
  override name = 'UnavailableError';
  constructor(message: string) {
    super('unavailable', message);
  }
}
