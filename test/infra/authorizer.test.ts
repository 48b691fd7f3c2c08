import type { APIGatewayRequestAuthorizerEvent } from 'aws-lambda';
import { describe, expect, it, vi } from 'vitest';
import { authorize } from '#functions/authorizer.ts';
import { redactSearchId } from '#lib/log.ts';

const METHOD_ARN = 'arn:aws:execute-api:eu-west-1:111111111111:abc123/dev/POST/api/v1/search/image';
const SHARED = 'vps-dev-shared-body-auth-requests';

function event(headers: Record<string, string> | null): APIGatewayRequestAuthorizerEvent {
  return { type: 'REQUEST', methodArn: METHOD_ARN, headers } as unknown as APIGatewayRequestAuthorizerEvent;
}

describe('search-id authorizer', () => {
  it('reports the Bearer search id as the usage identifier key and allows the method', () => {
    const result = authorize(event({ Authorization: 'Bearer sid_abcdefabcdefabcdef' }), SHARED);
    expect(result.usageIdentifierKey).toBe('sid_abcdefabcdefabcdef');
    expect(result.policyDocument.Statement).toEqual([
      { Action: 'execute-api:Invoke', Effect: 'Allow', Resource: METHOD_ARN },
    ]);
    expect(result.context).toEqual({ searchIdSource: 'header' });
  });

  it('reads the header case-insensitively and accepts a lower-case scheme', () => {
    expect(authorize(event({ authorization: 'bearer sid_lower' }), SHARED).usageIdentifierKey).toBe(
      'sid_lower',
    );
  });

  it('derives the principal id from a hash, never the search id itself', () => {
    const result = authorize(event({ Authorization: 'Bearer sid_secretvalue' }), SHARED);
    expect(result.principalId).toMatch(/^sid-[0-9a-f]{16}$/);
    expect(JSON.stringify({ ...result, usageIdentifierKey: undefined })).not.toContain('secretvalue');
  });

  it('gives the same search id the same principal id', () => {
    const a = authorize(event({ Authorization: 'Bearer sid_same' }), SHARED).principalId;
    const b = authorize(event({ Authorization: 'Bearer sid_same' }), SHARED).principalId;
    expect(a).toBe(b);
  });

  it("gives as principal id the name the functions' log lines give the search id, so both join", () => {
    const result = authorize(event({ Authorization: 'Bearer sid_same' }), SHARED);
    expect(result.principalId).toBe(redactSearchId('sid_same'));
    // sha256("sid_same"), its first 16 hex digits
    expect(result.principalId).toBe('sid-d8c363105adab11c');
  });

  it('allows a request without Authorization (search id in the body) under the shared key', () => {
    const result = authorize(event({ 'content-type': 'application/json' }), SHARED);
    expect(result.usageIdentifierKey).toBe(SHARED);
    expect(result.principalId).toBe('body-auth');
    expect(result.policyDocument.Statement[0]).toMatchObject({ Effect: 'Allow' });
    expect(result.context).toEqual({ searchIdSource: 'body' });
  });

  it('allows a request without headers and without a shared key with no usage identifier key', () => {
    const result = authorize(event(null), undefined);
    expect(result).not.toHaveProperty('usageIdentifierKey');
    expect(result.policyDocument.Statement[0]).toMatchObject({ Effect: 'Allow' });
  });

  it('treats a malformed Authorization header like a missing one, so the handler answers in the error shape', () => {
    for (const header of ['Basic dXNlcjpwYXNz', 'Bearer', 'Bearer two tokens', '']) {
      const result = authorize(event({ Authorization: header }), SHARED);
      expect(result.usageIdentifierKey).toBe(SHARED);
      expect(result.context).toEqual({ searchIdSource: 'body' });
    }
  });

  it('never logs', async () => {
    // Prepare
    const out = vi.spyOn(process.stdout, 'write');
    const err = vi.spyOn(process.stderr, 'write');
    vi.stubEnv('GATEWAY_SHARED_KEY', SHARED);
    const { handler } = await import('#functions/authorizer.ts');

    // Act
    const result = await handler(event({ Authorization: 'Bearer sid_quietquiet' }));

    // Assess
    expect(result.usageIdentifierKey).toBe('sid_quietquiet');
    expect(out).not.toHaveBeenCalled();
    expect(err).not.toHaveBeenCalled();
    vi.restoreAllMocks();
    vi.unstubAllEnvs();
  });
});
