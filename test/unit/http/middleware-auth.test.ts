import type { APIGatewayProxyEvent, Context } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '#lib/config.ts';
import { configureContainer, getContainer } from '#lib/container.ts';
import { adminEndpoint, publicEndpoint } from '#lib/http/middleware.ts';
import { json } from '#lib/http/responses.ts';
import { STUB_SEARCH_ID, stubPublicStores } from '#test/support/public-stores.ts';

/**
 * The checks of the handlers' middleware (lib/http/middleware.ts) that the local stack cannot reach: an
 * admin API without a token of its own (AWS, where the gateway authorises by IAM), and a search id of a
 * feed whose deletion has started. No ADMIN_TOKEN here.
 */
const SEARCH_ID = STUB_SEARCH_ID;
const context = { awsRequestId: 'lambda-invocation-1' } as Context;

configureContainer(loadConfig({ LOG_LEVEL: 'silent' }));

function event(
  method: string,
  path: string,
  options: { headers?: Record<string, string>; body?: unknown; userArn?: string } = {},
): APIGatewayProxyEvent {
  return {
    httpMethod: method,
    resource: path,
    path,
    headers: {
      ...options.headers,
      ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    multiValueHeaders: {},
    queryStringParameters: null,
    multiValueQueryStringParameters: null,
    pathParameters: null,
    stageVariables: null,
    requestContext: {
      requestId: 'gateway-request-1',
      ...(options.userArn ? { identity: { userArn: options.userArn } } : {}),
    } as APIGatewayProxyEvent['requestContext'],
    body: options.body === undefined ? null : JSON.stringify(options.body),
    isBase64Encoded: false,
  };
}

describe('admin endpoint without an admin token', () => {
  it('answers only a caller the gateway authorised by IAM', async () => {
    // Prepare
    let handled = 0;
    const handler = adminEndpoint(async () => {
      handled++;
      return json(200, {});
    });
    // Act
    const anonymous = await handler(event('GET', '/admin/v1/feeds'), context);
    const anyBearer = await handler(
      event('GET', '/admin/v1/feeds', { headers: { authorization: 'Bearer anything-at-all-0123' } }),
      context,
    );
    const signed = await handler(
      event('GET', '/admin/v1/feeds', { userArn: 'arn:aws:iam::123456789012:user/ops' }),
      context,
    );
    // Assess
    expect([anonymous.statusCode, anyBearer.statusCode, signed.statusCode]).toEqual([401, 401, 200]);
    expect(JSON.parse(anonymous.body).error.code).toBe('unauthorized');
    expect(handled).toBe(1);
  });
});

describe('public endpoint', () => {
  it('takes a search id of a feed being deleted as unknown', async () => {
    // Prepare
    const handler = publicEndpoint({ endpoint: 'related', idField: 'searchId' }, async () => json(200, {}));
    const request = event('POST', '/api/v1/related', {
      headers: { authorization: `Bearer ${SEARCH_ID}` },
      body: {},
    });
    // Act
    stubPublicStores(getContainer());
    const live = await handler(structuredClone(request), context);
    stubPublicStores(getContainer(), { feed: { deletingAt: '2026-11-22T11:00:00.000Z' } });
    const deleting = await handler(structuredClone(request), context);
    // Assess
    expect(live.statusCode).toBe(200);
    expect(deleting.statusCode).toBe(401);
    expect(JSON.parse(deleting.body).error.code).toBe('invalid_search_id');
  });

  it('meters an answer of 500 as a server error', async () => {
    // Prepare
    const outcomes: string[] = [];
    stubPublicStores(getContainer(), { record: async (entry) => void outcomes.push(entry.outcome) });
    const handler = publicEndpoint({ endpoint: 'related', idField: 'searchId' }, async () => {
      throw new Error('store down');
    });
    // Act
    const response = await handler(
      event('POST', '/api/v1/related', { headers: { authorization: `Bearer ${SEARCH_ID}` }, body: {} }),
      context,
    );
    // Assess
    expect(response.statusCode).toBe(500);
    expect(outcomes).toEqual(['server_error']);
  });
});
