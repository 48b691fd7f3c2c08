import type { APIGatewayProxyEvent, Context } from 'aws-lambda';
import { beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '#lib/config.ts';
import { configureContainer, type Container, getContainer } from '#lib/container.ts';
import { adminEndpoint, publicEndpoint } from '#lib/http/middleware.ts';
import { json } from '#lib/http/responses.ts';
import { redactSearchId } from '#lib/log.ts';
import { STUB_SEARCH_ID, stubPublicStores } from '#test/support/public-stores.ts';
import { recordingLogger } from '#test/support/recording-logger.ts';

/**
 * The log lines of the handlers' middleware (lib/http/middleware.ts): the access line of every request,
 * the error line of a 5xx, the metering line; what they carry and what they must not (a search id, a body).
 */
const ADMIN_TOKEN = 'admin-token-0123456789';
const SEARCH_ID = STUB_SEARCH_ID;
type Line = { level: string; message: string; fields?: Record<string, unknown> };
let lines: Line[];

configureContainer(loadConfig({ ADMIN_TOKEN, LOG_LEVEL: 'silent' }));

beforeEach(() => {
  lines = [];
  getContainer().logger = recordingLogger(lines, { fields: true });
});

function event(
  method: string,
  resource: string,
  path: string,
  options: { pathParameters?: Record<string, string>; body?: unknown; token?: string } = {},
): APIGatewayProxyEvent {
  return {
    httpMethod: method,
    resource,
    path,
    headers: {
      authorization: `Bearer ${options.token ?? ADMIN_TOKEN}`,
      ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    multiValueHeaders: {},
    queryStringParameters: null,
    multiValueQueryStringParameters: null,
    pathParameters: options.pathParameters ?? null,
    stageVariables: null,
    requestContext: { requestId: 'gateway-request-1' } as APIGatewayProxyEvent['requestContext'],
    body: options.body === undefined ? null : JSON.stringify(options.body),
    isBase64Encoded: false,
  };
}

const context = { awsRequestId: 'lambda-invocation-1' } as Context;
const revoke = (searchId: string) =>
  event('DELETE', '/admin/v1/keys/{searchId}', `/admin/v1/keys/${searchId}`, {
    pathParameters: { searchId },
  });
const accessLine = () => lines.find((line) => line.message === 'request');

describe('access line', () => {
  it('names the route and the path with the search id redacted, never the id itself', async () => {
    const handler = adminEndpoint(async () => json(200, { revoked: true }));

    const response = await handler(revoke(SEARCH_ID), context);

    expect(response.statusCode).toBe(200);
    expect(accessLine()?.fields).toMatchObject({
      method: 'DELETE',
      route: '/admin/v1/keys/{searchId}',
      path: `/admin/v1/keys/${redactSearchId(SEARCH_ID)}`,
      status: 200,
    });
    expect(JSON.stringify(lines)).not.toContain(SEARCH_ID);
    // The same name for the same id (not a random one), as the authorizer's principalId.
    expect(redactSearchId(SEARCH_ID)).toMatch(/^sid-[0-9a-f]{16}$/);
  });

  it('redacts a search id path parameter of any shape, sent escaped or not', async () => {
    const handler = adminEndpoint(async () => json(200, {}));
    await handler(revoke('odd:id'), context);
    await handler(
      event('DELETE', '/admin/v1/keys/{searchId}', '/admin/v1/keys/odd%3Aid', {
        pathParameters: { searchId: 'odd:id' },
      }),
      context,
    );
    const paths = lines.filter((line) => line.message === 'request').map((line) => line.fields?.path);
    expect(paths).toEqual([
      `/admin/v1/keys/${redactSearchId('odd:id')}`,
      `/admin/v1/keys/${redactSearchId('odd:id')}`,
    ]);
  });

  it("carries the gateway request id and the Lambda invocation id, to join Lambda's own lines", async () => {
    const handler = adminEndpoint(async () => json(200, {}));
    await handler(revoke(SEARCH_ID), context);
    expect(accessLine()?.fields).toMatchObject({
      requestId: 'gateway-request-1',
      awsRequestId: 'lambda-invocation-1',
    });
  });

  it('carries the error code of a 4xx answer', async () => {
    const handler = adminEndpoint(async () => json(200, {}));
    await handler(
      { ...revoke(SEARCH_ID), headers: { authorization: 'Bearer not-the-admin-token' } },
      context,
    );
    expect(accessLine()?.fields).toMatchObject({ status: 401, code: 'unauthorized' });
    expect(lines.filter((line) => line.level === 'error')).toEqual([]);
  });

  it('has no code on a success', async () => {
    const handler = adminEndpoint(async () => json(200, {}));
    await handler(revoke(SEARCH_ID), context);
    expect(accessLine()?.fields).not.toHaveProperty('code');
  });
});

describe('5xx error line', () => {
  it('carries the stack, method, route, redacted path and the AWS SDK metadata, not the body', async () => {
    const sdkError = Object.assign(new Error('Throughput exceeds the current capacity'), {
      name: 'ProvisionedThroughputExceededException',
      $metadata: { requestId: 'DDB-REQ-42', httpStatusCode: 400 },
    });
    const handler = adminEndpoint(async () => {
      throw sdkError;
    });

    const response = await handler(
      event('DELETE', '/admin/v1/keys/{searchId}', `/admin/v1/keys/${SEARCH_ID}`, {
        pathParameters: { searchId: SEARCH_ID },
        body: { secretField: 'body-secret' },
      }),
      context,
    );

    expect(response.statusCode).toBe(503);
    const failed = lines.find((line) => line.message === 'request failed');
    expect(failed).toMatchObject({
      level: 'error',
      fields: {
        requestId: 'gateway-request-1',
        awsRequestId: 'lambda-invocation-1',
        method: 'DELETE',
        route: '/admin/v1/keys/{searchId}',
        path: `/admin/v1/keys/${redactSearchId(SEARCH_ID)}`,
        code: 'unavailable',
        error: 'ProvisionedThroughputExceededException: Throughput exceeds the current capacity',
        awsErrorRequestId: 'DDB-REQ-42',
        awsErrorStatus: 400,
      },
    });
    expect(failed?.fields?.stack).toEqual(sdkError.stack);
    expect(String(failed?.fields?.stack)).toContain('middleware-logs.test.ts');
    expect(JSON.stringify(lines)).not.toContain('body-secret');
    expect(JSON.stringify(lines)).not.toContain(SEARCH_ID);
  });
});

describe('idempotency error lines', () => {
  it('carry the stack and the AWS SDK metadata of a store failure', async () => {
    const c = getContainer();
    const storeDown = () =>
      Promise.reject(
        Object.assign(new Error('Idempotency table unreachable'), {
          $metadata: { requestId: 'IDEM-1', httpStatusCode: 503 },
        }),
      );
    c.idempotency = {
      begin: async () => ({ kind: 'started' }),
      finish: storeDown,
      abandon: storeDown,
    } as unknown as Container['idempotency'];
    const created = adminEndpoint(async () => json(201, { ok: true }));
    const refused = adminEndpoint(async () => json(400, { error: 'no' }));
    const post = () => ({
      ...event('POST', '/admin/v1/feeds', '/admin/v1/feeds', { body: {} }),
      headers: {
        authorization: `Bearer ${ADMIN_TOKEN}`,
        'content-type': 'application/json',
        'idempotency-key': 'k-1',
      },
    });

    expect((await created(post(), context)).statusCode).toBe(201);
    expect((await refused(post(), context)).statusCode).toBe(400);

    for (const message of ['idempotency record not saved', 'idempotency claim not released'])
      expect(lines.find((line) => line.message === message)?.fields, message).toMatchObject({
        requestId: 'gateway-request-1',
        error: 'Error: Idempotency table unreachable',
        stack: expect.stringContaining('Idempotency table unreachable'),
        awsErrorRequestId: 'IDEM-1',
        awsErrorStatus: 503,
      });
  });
});

describe('public endpoint', () => {
  it('names the search id by the hash the authorizer gives the gateway, and logs a metering failure in full', async () => {
    stubPublicStores(getContainer(), {
      record: async () => {
        throw Object.assign(new Error('usage store down'), { $metadata: { requestId: 'U-1' } });
      },
    });
    const handler = publicEndpoint({ endpoint: 'related', idField: 'searchId' }, async () => json(200, {}));

    const response = await handler(
      event('POST', '/api/v1/related', '/api/v1/related', { token: SEARCH_ID, body: {} }),
      context,
    );

    expect(response.statusCode).toBe(200);
    expect(accessLine()?.fields).toMatchObject({
      feedId: 'shop',
      searchId: redactSearchId(SEARCH_ID),
      route: '/api/v1/related',
    });
    const metering = lines.find((line) => line.message === 'usage metering failed');
    expect(metering?.fields).toMatchObject({
      awsRequestId: 'lambda-invocation-1',
      error: 'Error: usage store down',
      awsErrorRequestId: 'U-1',
      stack: expect.stringContaining('usage store down'),
    });
    expect(JSON.stringify(lines)).not.toContain(SEARCH_ID);
  });
});
