import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { errorFields, redactPath, redactSearchId } from '#lib/log.ts';

const SEARCH_ID = 'vps_3hV8rQm0yJt2cW9pXb4LkN1sZa6DfGe7';

describe('redactSearchId', () => {
  it('names a search id by sid- and 16 hex digits of its SHA-256: stable, none of the id in it', () => {
    const sha = createHash('sha256').update(SEARCH_ID).digest('hex');
    expect(redactSearchId(SEARCH_ID)).toBe(`sid-${sha.slice(0, 16)}`);
    expect(redactSearchId(SEARCH_ID)).toBe(redactSearchId(SEARCH_ID));
    // Two ids with the same first characters (every id starts with vps_) are told apart.
    expect(redactSearchId('vps_3hV8other')).not.toBe(redactSearchId(SEARCH_ID));
    expect(redactSearchId(SEARCH_ID)).not.toContain('vps_');
  });
});

describe('redactPath', () => {
  it('replaces the named search id and any segment shaped like one, and drops the query', () => {
    expect(redactPath(`/admin/v1/keys/${SEARCH_ID}?x=1`)).toBe(`/admin/v1/keys/${redactSearchId(SEARCH_ID)}`);
    expect(redactPath('/admin/v1/keys/legacy%2Did', ['legacy-id'])).toBe(
      `/admin/v1/keys/${redactSearchId('legacy-id')}`,
    );
    expect(redactPath('/admin/v1/feeds/shop/imports/imp_1', [undefined])).toBe(
      '/admin/v1/feeds/shop/imports/imp_1',
    );
    // A malformed escape is kept as sent.
    expect(redactPath('/a/%E0%A4%A')).toBe('/a/%E0%A4%A');
  });
});

describe('errorFields', () => {
  it("gives name and message, stack, cause, and an AWS SDK error's request id and status", () => {
    const error = Object.assign(new Error('Rate exceeded', { cause: new TypeError('socket hang up') }), {
      name: 'ThrottlingException',
      $metadata: { requestId: 'REQ-1', httpStatusCode: 429, attempts: 3 },
    });
    expect(errorFields(error)).toEqual({
      error: 'ThrottlingException: Rate exceeded',
      stack: error.stack,
      cause: 'TypeError: socket hang up',
      awsErrorRequestId: 'REQ-1',
      awsErrorStatus: 429,
    });
    expect(errorFields(new Error('plain'))).not.toHaveProperty('awsErrorRequestId');
    expect(errorFields('a string')).toEqual({ error: 'a string' });
  });
});
