import type { APIGatewayAuthorizerResult, APIGatewayRequestAuthorizerEvent } from 'aws-lambda';
import { loadConfig } from '#lib/config.ts';
import { redactSearchId } from '#lib/log.ts';

/**
 * API Gateway REQUEST authorizer of the public API (apiKeySource AUTHORIZER). It authenticates nothing:
 * the handler does (search id lookup, revocation, domains, hourly limit). Its one job is to tell the
 * gateway which API key meters the request:
 * - `Authorization: Bearer <searchId>` → usageIdentifierKey = the search id, i.e. the API key the admin API
 *   registered in the feed's usage plan (Free or Pro). An unknown id is refused by the gateway (401).
 * - no (or a non-Bearer) Authorization header → the search id is in the body, which an authorizer cannot
 *   see: the shared key (GATEWAY_SHARED_KEY, Shared usage plan), or no key when none is configured.
 * It never denies and never logs the id; principalId is a hash of it, the name the functions' log lines
 * give the same id (redactSearchId), so the gateway's records and theirs join.
 */
export function authorize(
  event: APIGatewayRequestAuthorizerEvent,
  sharedKey: string | undefined,
): APIGatewayAuthorizerResult {
  const token = bearerToken(headerValue(event.headers, 'authorization'));
  const usageIdentifierKey = token ?? sharedKey;
  return {
    principalId: token ? redactSearchId(token) : 'body-auth',
    policyDocument: {
      Version: '2012-10-17',
      Statement: [{ Action: 'execute-api:Invoke', Effect: 'Allow', Resource: event.methodArn }],
    },
    context: { searchIdSource: token ? 'header' : 'body' },
    ...(usageIdentifierKey === undefined ? {} : { usageIdentifierKey }),
  };
}

function headerValue(headers: APIGatewayRequestAuthorizerEvent['headers'], name: string): string | undefined {
  for (const [key, value] of Object.entries(headers ?? {})) {
    if (key.toLowerCase() === name && value) return value;
  }
  return undefined;
}

function bearerToken(header: string | undefined): string | undefined {
  const match = header === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1];
}

const sharedKey = loadConfig().gatewaySharedKey;

export const handler = async (event: APIGatewayRequestAuthorizerEvent): Promise<APIGatewayAuthorizerResult> =>
  authorize(event, sharedKey);
