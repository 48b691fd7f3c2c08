import { describe, expect, it } from 'vitest';
import { InvalidImageError, NotFoundError, ValidationError } from '#lib/domain/errors.ts';
import { toErrorBody } from '#lib/http/errors.ts';

describe('toErrorBody', () => {
  it("names the function's own deadline as such, not as a dependency that is down", () => {
    // As @middy/core throws it when the Lambda deadline (29 s locally) is about to pass
    const timeout = new Error('[AbortError]: The operation was aborted.', {
      cause: { package: '@middy/core' },
    });
    timeout.name = 'TimeoutError';
    expect(toErrorBody(timeout, 'r1').error).toMatchObject({
      status: 503,
      code: 'unavailable',
      message: 'The request took longer than the service allows. Retry later, or send a smaller image.',
    });
    // An SDK call that timed out is a dependency's
    const sdk = new Error('socket timed out');
    sdk.name = 'TimeoutError';
    expect(toErrorBody(sdk, 'r2').error.message).toBe(
      'A dependency is temporarily unavailable. Retry later.',
    );
  });

  it('answers a connection a dependency refused or dropped as 503 unavailable, not 500', () => {
    // Prepare: as Node's sockets raise them (no SDK retry flag on them)
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9200'), { code: 'ECONNREFUSED' });
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    // Act
    const answers = [toErrorBody(refused, 'r1'), toErrorBody(reset, 'r2')];
    // Assess
    for (const answer of answers) expect(answer.error).toMatchObject({ status: 503, code: 'unavailable' });
  });

  it('writes the line breaks, NULs and bidirectional overrides a request put in a message as escapes', () => {
    // As a product id or a path id comes back in "not found" (the fuzz's examples)
    const id = 'x\r\n\u202etxt.exe\u0000';
    expect(
      toErrorBody(new NotFoundError('product_not_found', `Product ${id} is not in this feed.`), 'r').error
        .message,
    ).toBe('Product x\\u000d\\u000a\\u202etxt.exe\\u0000 is not in this feed.');
    const invalid = new ValidationError('Invalid filters', [
      { path: 'filters.0.key', message: `unknown key "a\nb\u2066"` },
    ]);
    expect(toErrorBody(invalid, 'r').error.details).toEqual([
      { path: 'filters.0.key', message: 'unknown key "a\\u000ab\\u2066"' },
    ]);
    expect(
      toErrorBody(new NotFoundError('not_found', 'Feed a\u2028b\u200bc\ufeff not found.'), 'r').error.message,
    ).toBe('Feed a\\u2028b\\u200bc\\ufeff not found.');
    // Other text, accents and scripts included, is as sent.
    expect(
      toErrorBody(new NotFoundError('product_not_found', 'Product café-東京 is gone.'), 'r').error.message,
    ).toBe('Product café-東京 is gone.');
  });

  it('answers a refused image as 422 invalid_image naming its field, with the reason and format in details', () => {
    const refusal = new InvalidImageError({
      reason: 'unsupported_format',
      format: 'heic',
      problem: 'HEIC/HEIF is not a supported image format (supported: JPEG, PNG, WebP, GIF, AVIF, TIFF)',
    });
    expect(toErrorBody(refusal.forField('imageData'), 'r')).toEqual({
      error: {
        status: 422,
        code: 'invalid_image',
        message:
          'Invalid imageData: HEIC/HEIF is not a supported image format (supported: JPEG, PNG, WebP, GIF, AVIF, TIFF).',
        details: [
          {
            path: 'imageData',
            message:
              'HEIC/HEIF is not a supported image format (supported: JPEG, PNG, WebP, GIF, AVIF, TIFF)',
            reason: 'unsupported_format',
            format: 'heic',
          },
        ],
      },
      requestId: 'r',
    });
    // A field named once stays named: a later stage does not rename it
    expect(refusal.forField('fallback').forField('imageData').details[0]?.path).toBe('fallback');
  });
});
