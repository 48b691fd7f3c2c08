import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { APIGatewayProxyEvent, Context } from 'aws-lambda';
import type { RouteMatch } from '#lib/http/routes.ts';

const STAGE = 'local';

/**
 * Name → last value and name → every value, as API Gateway gives headers and query parameters. Built
 * from a Map: a name such as `constructor` or `__proto__` must become a key like any other, not reach
 * the plain object's prototype.
 */
function singleAndMultiValue(
  pairs: Iterable<[string, string]>,
): [Record<string, string>, Record<string, string[]>] {
  const values = new Map<string, string[]>();
  for (const [name, value] of pairs) {
    const list = values.get(name);
    if (list) list.push(value);
    else values.set(name, [value]);
  }
  return [
    Object.fromEntries([...values].map(([name, list]) => [name, list[list.length - 1]!])),
    Object.fromEntries(values),
  ];
}

/** Builds the REST API (v1) proxy event API Gateway would send for this request. */
export function toProxyEvent(
  request: IncomingMessage,
  url: URL,
  match: RouteMatch,
  body: string | null,
): APIGatewayProxyEvent {
  const pairs: [string, string][] = [];
  for (let i = 0; i < request.rawHeaders.length; i += 2)
    pairs.push([request.rawHeaders[i]!, request.rawHeaders[i + 1]!]);
  const [headers, multiValueHeaders] = singleAndMultiValue(pairs);
  const [query, multiQuery] = singleAndMultiValue(url.searchParams);
  const now = new Date();
  // The request's own method: HEAD reaches the GET route's handler as HEAD, as a gateway method would.
  const method = request.method ?? match.route.method;
  const hasQuery = Object.keys(query).length > 0;
  const hasParams = Object.keys(match.pathParameters).length > 0;
  return {
    resource: match.route.path,
    path: url.pathname,
    httpMethod: method,
    headers,
    multiValueHeaders,
    queryStringParameters: hasQuery ? query : null,
    multiValueQueryStringParameters: hasQuery ? multiQuery : null,
    pathParameters: hasParams ? match.pathParameters : null,
    stageVariables: null,
    body,
    isBase64Encoded: false,
    requestContext: {
      accountId: '000000000000',
      apiId: 'local',
      authorizer: null,
      protocol: `HTTP/${request.httpVersion}`,
      httpMethod: method,
      path: `/${STAGE}${url.pathname}`,
      stage: STAGE,
      requestId: randomUUID(),
      requestTimeEpoch: now.getTime(),
      requestTime: formatRequestTime(now),
      resourceId: 'local',
      resourcePath: match.route.path,
      identity: {
        accessKey: null,
        accountId: null,
        apiKey: null,
        apiKeyId: null,
        caller: null,
        clientCert: null,
        cognitoAuthenticationProvider: null,
        cognitoAuthenticationType: null,
        cognitoIdentityId: null,
        cognitoIdentityPoolId: null,
        principalOrgId: null,
        sourceIp: request.socket.remoteAddress ?? '127.0.0.1',
        user: null,
        userAgent: request.headers['user-agent'] ?? null,
        userArn: null,
      },
    },
  };
}

/** A Lambda context with the invocation deadline API Gateway imposes (29 s). */
export function toLambdaContext(functionName: string, requestId: string, timeoutMs = 29_000): Context {
  const deadline = Date.now() + timeoutMs;
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:local:000000000000:function:${functionName}`,
    memoryLimitInMB: '2048',
    awsRequestId: requestId,
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: 'local',
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => undefined,
    fail: () => undefined,
    succeed: () => undefined,
  };
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** API Gateway's requestTime format: 22/Nov/2026:03:04:05 +0000. */
function formatRequestTime(date: Date): string {
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${pad(date.getUTCDate())}/${MONTHS[date.getUTCMonth()]}/${date.getUTCFullYear()}:${pad(date.getUTCHours())}:${pad(date.getUTCMinutes())}:${pad(date.getUTCSeconds())} +0000`;
}
