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
  /** A refused image's reason (IMAGE_REFUSAL_REASONS), stable for clients to branch on. */
  reason?: string;
  /** A refused image's format as read from its bytes (`bmp`, `heic`), when it was recognised. */
  format?: string;
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

/** The reasons an image is refused (422 invalid_image), as its error detail's `reason` gives them. */
export const IMAGE_REFUSAL_REASONS = [
  'empty',
  'undecodable',
  'unsupported_format',
  'no_pixels',
  'too_many_pixels',
  'side_too_long',
  'too_many_scans',
] as const;

/** Why an image is refused, as the vision code finds it. */
export interface ImageRefusal {
  reason: (typeof IMAGE_REFUSAL_REASONS)[number];
  /** What is wrong, a clause without the field: "BMP is not a supported image format (…)". */
  problem: string;
  format?: string;
}

/**
 * An image refused: its message and its one detail name the request field it came in once the use case
 * that read that field says which (`forField`); the vision code below it sees bytes only.
 */
export class InvalidImageError extends DomainError {
  override name = 'InvalidImageError';
  constructor(
    readonly refusal: ImageRefusal,
    readonly field?: string,
  ) {
    super(
      'invalid_image',
      `Invalid ${field ?? 'image'}: ${refusal.problem}.`,
      field === undefined
        ? []
        : [
            {
              path: field,
              message: refusal.problem,
              reason: refusal.reason,
              ...(refusal.format ? { format: refusal.format } : {}),
            },
          ],
    );
  }

  /** The same refusal, naming the request field the image came in (kept if one is named already). */
  forField(field: string): InvalidImageError {
    return this.field === undefined ? new InvalidImageError(this.refusal, field) : this;
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
