import { describe, expect, it } from 'vitest';
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
});
