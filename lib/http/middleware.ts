import { timingSafeEqual } from 'node:crypto';
import middy, { type MiddlewareObj } from '@middy/core';
import httpJsonBodyParser from '@middy/http-json-body-parser';
import type { APIGatewayProxyEvent, APIGatewayProxyResult, Context } from 'aws-lambda';
import { type Container, getContainer } from '#lib/container.ts';
import { DomainError, NotFoundError, RateLimitedError, ValidationError } from '#lib/domain/errors.ts';
import { hostAllowed, hourlyLimitOf } from '#lib/domain/feeds.ts';
import { keyBelongsTo } from '#lib/domain/keys.ts';
import { nullsAsAbsent, refuseQuery } from '#lib/domain/validation.ts';
import { answerCoding } from '#lib/http/compression.ts';
import { corsHeaders, VARY } from '#lib/http/cors.ts';
import { idempotent } from '#lib/http/idempotency.ts';
import { authenticationChallenge, toErrorBody } from '#lib/http/errors.ts';
import { json } from '#lib/http/responses.ts';
import type { AppContext, RequestState } from '#lib/http/context.ts';
import { errorFields, redactPath, redactSearchId } from '#lib/log.ts';
import type { Endpoint, UsageOutcome } from '#lib/ports.ts';

/**
 * Longest id a path parameter or a search id may be. Feed ids are at most 64 characters, import ids and
 * search ids are made here and shorter; a longer one names nothing, and would otherwise reach DynamoDB
 * as a key over its size limit (a ValidationException, which is a 500).
 */
const MAX_ID_LENGTH = 256;

/** The event handlers see: headers lower-cased, body parsed from JSON. */
export type JsonEvent = Omit<APIGatewayProxyEvent, 'body'> & { body: unknown };
type Request = middy.Request<JsonEvent, APIGatewayProxyResult, Error, AppContext>;

/** Last-used time is written at most this often per key, to keep one write off most requests. */
const TOUCH_INTERVAL_MS = 60_000;

/**
 * Opens and closes every request: request id and logger before; on the way out (success or error) the
 * error mapper, rate-limit, request-id and Vary headers, usage metering and one access-log line. It is
 * the first middleware, so its `after`/`onError` run last and see the final outcome.
 */
function lifecycle(): MiddlewareObj<JsonEvent, APIGatewayProxyResult, Error, AppContext> {
  const finish = async (request: Request, code?: string) => {
    const container = getContainer();
    const state = request.context.state;
    const response = request.response ?? json(500, toErrorBody(undefined, state.requestId));
    response.headers = {
      ...response.headers,
      ...responseHeaders(state),
      ...corsHeaders(request.event.headers.origin),
    };
    // A HEAD request runs its GET route (infra adds a HEAD method beside each GET one): the same status
    // and headers, no body. The body goes here (the gateway passes one on), so neither the gateway nor the
    // local server has one left to compress: the coding the GET's answer gets is named from it first (a
    // HEAD of an answer from 1 KB lacked the GET's Content-Encoding).
    if (request.event.httpMethod === 'HEAD') {
      const bytes = Buffer.byteLength(response.body ?? '', response.isBase64Encoded ? 'base64' : 'utf8');
      const coding = answerCoding(bytes, request.event.headers['accept-encoding']);
      if (coding) response.headers = { ...response.headers, 'Content-Encoding': coding };
      response.body = '';
    }
    request.response = response;
    await meter(container, state, response.statusCode);
    state.logger.info('request', {
      ...where(request.event),
      status: response.statusCode,
      ...(code === undefined ? {} : { code }),
      ms: Date.now() - state.startedAt,
    });
  };
  return {
    before: (request) => {
      const container = getContainer();
      const requestId = request.event.requestContext?.requestId ?? request.context.awsRequestId;
      request.event.headers = lowerCaseHeaders(request.event.headers);
      request.context.state = {
        requestId,
        startedAt: Date.now(),
        logger: container.logger.child(requestIds(request.context, requestId)),
      };
      const bodyBytes = Buffer.byteLength(typeof request.event.body === 'string' ? request.event.body : '');
      if (bodyBytes > container.config.maxBodyBytes) {
        throw new DomainError(
          'payload_too_large',
          `Request body exceeds ${container.config.maxBodyBytes} bytes; send a smaller image.`,
        );
      }
    },
    after: finish,
    onError: async (request) => {
      const container = getContainer();
      const state = request.context.state ?? {
        requestId: request.context.awsRequestId,
        startedAt: Date.now(),
        logger: container.logger.child(requestIds(request.context, request.context.awsRequestId)),
      };
      request.context.state = state;
      const body = toErrorBody(request.error, state.requestId);
      if (body.error.status >= 500) {
        // The error's stack and, from an AWS SDK call, the service's request id; never the request body.
        state.logger.error('request failed', {
          ...where(request.event),
          code: body.error.code,
          ...errorFields(request.error),
        });
      }
      const headers: Record<string, string> = {};
      if (request.error instanceof RateLimitedError)
        headers['Retry-After'] = String(request.error.retryAfterSeconds);
      if (body.error.code === 'unavailable') headers['Retry-After'] = '5';
      if (body.error.code === 'idempotency_key_in_use') headers['Retry-After'] = '1';
      const challenge = authenticationChallenge(body.error.code, Boolean(container.config.adminToken));
      if (challenge) headers['WWW-Authenticate'] = challenge;
      request.response = json(body.error.status, body, headers);
      await finish(request, body.error.code);
    },
  };
}

/**
 * A request's ids for its logger: the gateway's request id (X-Request-Id) and Lambda's invocation id, which
 * Lambda's own lines carry (START, END, REPORT, "Task timed out"): a timeout or a crash is found by the
 * request id a client quotes. (Local mode: both are the server's request id.)
 */
function requestIds(context: Context, requestId: string): Record<string, unknown> {
  return context.awsRequestId ? { requestId, awsRequestId: context.awsRequestId } : { requestId };
}

/**
 * Where a log line's request went: its method, its route (the resource template, `/admin/v1/keys/{searchId}`)
 * and its path with any search id in it redacted (redactPath): the path of a key's revocation is a
 * credential.
 */
function where(event: JsonEvent): { method: string; route?: string; path: string } {
  return {
    method: event.httpMethod,
    ...(event.resource ? { route: event.resource } : {}),
    path: redactPath(event.path ?? '', [event.pathParameters?.searchId]),
  };
}

function responseHeaders(state: RequestState): Record<string, string> {
  const headers: Record<string, string> = { 'X-Request-Id': state.requestId, Vary: VARY };
  if (state.rateLimit) {
    headers['RateLimit-Limit'] = String(state.rateLimit.limit);
    headers['RateLimit-Remaining'] = String(state.rateLimit.remaining);
    headers['RateLimit-Reset'] = String(state.rateLimit.resetSeconds);
  }
  return headers;
}

async function meter(container: Container, state: RequestState, status: number): Promise<void> {
  if (!state.auth || !state.endpoint) return;
  const outcome: UsageOutcome =
    status === 429 ? 'rate_limited' : status >= 500 ? 'server_error' : status >= 400 ? 'client_error' : 'ok';
  try {
    await container.usage.record({
      feedId: state.auth.feed.feedId,
      feedCreatedAt: state.auth.feed.createdAt,
      searchId: state.auth.key.searchId,
      endpoint: state.endpoint,
      outcome,
      at: container.clock.now(),
      ...(state.usageContext ? { context: state.usageContext } : {}),
    });
  } catch (error) {
    // Metering must never turn an answered request into a failure; the miss is logged for billing review.
    state.logger.error('usage metering failed', { endpoint: state.endpoint, status, ...errorFields(error) });
  }
}

function lowerCaseHeaders(headers: APIGatewayProxyEvent['headers'] | null): APIGatewayProxyEvent['headers'] {
  const out: APIGatewayProxyEvent['headers'] = {};
  for (const [name, value] of Object.entries(headers ?? {})) out[name.toLowerCase()] = value;
  return out;
}

/** JSON bodies; a request without one (GET, DELETE, a bodiless POST) gets `body: undefined`. */
function jsonBody(): MiddlewareObj<JsonEvent, APIGatewayProxyResult, Error, AppContext> {
  const parser = httpJsonBodyParser() as unknown as MiddlewareObj<
    JsonEvent,
    APIGatewayProxyResult,
    Error,
    AppContext
  >;
  return {
    before: async (request) => {
      const body = request.event.body;
      if (body === null || body === undefined || body === '') {
        request.event.body = undefined;
        return;
      }
      // Media types are case-insensitive and may space their parameters (RFC 9110); the parser's pattern
      // takes only lower case with no space before ';'.
      const type = request.event.headers['content-type'];
      if (type !== undefined)
        request.event.headers['content-type'] = type
          .trim()
          .toLowerCase()
          .replace(/\s*;\s*/g, ';');
      await parser.before?.(request);
    },
  };
}

/**
 * Search-id authentication (DESIGN §3): `Authorization: Bearer <id>` or the body field; both present and
 * different → 400; missing or unknown → 401; revoked → 403. Then the feed's domain allow-list and the
 * plan's rolling-hour limit.
 */
function searchIdAuth(
  idField: 'searchId' | 'feedId',
): MiddlewareObj<JsonEvent, APIGatewayProxyResult, Error, AppContext> {
  return {
    before: async (request) => {
      const container = getContainer();
      const { event, context } = request;
      const state = context.state;
      const bodyId = bodySearchId(event.body, idField);
      let headerId: string | undefined;
      try {
        headerId = bearerToken(event.headers.authorization, 'missing_search_id');
      } catch (error) {
        // Another scheme (a proxy's Basic credentials, an empty Bearer) is not a search id: with one in
        // the body, that one counts; without, the header's form is what to explain.
        if (bodyId === undefined) throw error;
      }
      if (headerId !== undefined && bodyId !== undefined && headerId !== bodyId) {
        throw new ValidationError(
          `The Authorization header and the body field ${idField} name different search ids.`,
          [{ path: idField, message: 'differs from the Authorization header' }],
        );
      }
      const searchId = headerId ?? bodyId;
      if (!searchId) {
        throw new DomainError(
          'missing_search_id',
          `Send a search id as Authorization: Bearer <searchId> or in the body field ${idField}.`,
        );
      }
      // Longer than any search id: unknown without asking the store (whose key size limit it could pass).
      if (searchId.length > MAX_ID_LENGTH) throw new DomainError('invalid_search_id', 'Unknown search id.');
      const key = await container.keys.get(searchId);
      if (!key) throw new DomainError('invalid_search_id', 'Unknown search id.');
      if (key.revokedAt) throw new DomainError('search_id_revoked', 'This search id has been revoked.');
      let feed = await container.feeds.get(key.feedId);
      // A new feed's key against a cached earlier feed of the same id: read the feed past the cache.
      if (feed && !keyBelongsTo(key, feed)) feed = await container.feeds.get(key.feedId, { fresh: true });
      // A key of an earlier feed with the same id (one a deletion's sweep missed) is unknown to this one.
      if (!feed || feed.deletingAt || !keyBelongsTo(key, feed)) {
        throw new DomainError('invalid_search_id', 'Unknown search id.');
      }
      state.auth = { key, feed };
      state.logger = state.logger.child({ feedId: feed.feedId, searchId: redactSearchId(searchId) });

      checkOrigin(event.headers, feed.domains, feed.requireOrigin);

      const now = container.clock.now();
      const lastUsed = key.lastUsedAt ? Date.parse(key.lastUsedAt) : 0;
      const [decision] = await Promise.all([
        container.usage.consume(searchId, hourlyLimitOf(feed, container.config.planLimits), now),
        now.getTime() - lastUsed > TOUCH_INTERVAL_MS ? container.keys.touch(searchId, now) : undefined,
      ]);
      state.rateLimit = decision;
      if (!decision.allowed) throw new RateLimitedError(decision.retryAfterSeconds);
    },
  };
}

function bodySearchId(body: unknown, field: string): string | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const value = (body as Record<string, unknown>)[field];
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw new ValidationError(`Invalid ${field}: expected a string or a number.`, [
    { path: field, message: 'expected a string or a number' },
  ]);
}

function bearerToken(
  header: string | undefined,
  missingCode: 'missing_search_id' | 'unauthorized',
): string | undefined {
  if (header === undefined || header.trim() === '') return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) {
    throw new DomainError(missingCode, 'The Authorization header must be "Bearer <token>".');
  }
  return match[1];
}

function checkOrigin(
  headers: APIGatewayProxyEvent['headers'],
  domains: string[],
  requireOrigin: boolean,
): void {
  // An empty header is no header; Referer counts only when Origin is absent.
  const source = headers.origin?.trim() || headers.referer?.trim();
  if (!source) {
    if (requireOrigin)
      throw new DomainError(
        'domain_not_allowed',
        domains.length > 0
          ? 'This search id only accepts requests from its domains (with an Origin or Referer header).'
          : 'This search id only accepts requests with an Origin or Referer header.',
      );
    return;
  }
  // `Origin: null` is an opaque origin (a sandboxed iframe, a data: or file: page): any site can send
  // it, so it matches no domain. Treated as absent, it let every site use a restricted search id.
  if (source === 'null') {
    if (domains.length === 0 && !requireOrigin) return;
    throw new DomainError(
      'domain_not_allowed',
      'Requests from an opaque origin (Origin: null) are not allowed for this search id.',
    );
  }
  if (domains.length === 0) return;
  let host: string;
  try {
    host = new URL(source).hostname;
  } catch {
    throw new DomainError('domain_not_allowed', 'The request origin is not a valid URL.');
  }
  if (!hostAllowed(host, domains)) {
    throw new DomainError('domain_not_allowed', `Requests from ${host} are not allowed for this search id.`);
  }
}

/** Admin API: `Authorization: Bearer <admin token>` (or, in AWS, a route already authorised by IAM). */
function adminAuth(): MiddlewareObj<JsonEvent, APIGatewayProxyResult, Error, AppContext> {
  return {
    before: (request) => {
      const expected = getContainer().config.adminToken;
      if (!expected) {
        // Without a token the gateway must have authorised the caller with IAM (SigV4).
        if (request.event.requestContext?.identity?.userArn) return;
        throw new DomainError('unauthorized', 'Admin API requires an authorised caller.');
      }
      const token = bearerToken(request.event.headers.authorization, 'unauthorized');
      if (!token) {
        throw new DomainError('unauthorized', 'Send the admin token as Authorization: Bearer <token>.');
      }
      // (Told apart from a missing one: a stale token, after the server got another, is the usual case.)
      if (!safeEqual(token, expected)) throw new DomainError('unauthorized', 'The admin token is not valid.');
    },
  };
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

type EndpointHandler = (
  event: JsonEvent,
  context: AppContext,
  container: Container,
) => Promise<APIGatewayProxyResult>;
type LambdaHandler = (event: APIGatewayProxyEvent, context: Context) => Promise<APIGatewayProxyResult>;

/**
 * A public endpoint: lifecycle → body → search-id auth, domain, rate limit → handler. The container is
 * built at definition (a bad configuration fails the cold start) and looked up again per request, so a
 * local runtime that reconfigures in-process is honoured.
 */
export function publicEndpoint(
  options: { endpoint: Endpoint; idField: 'searchId' | 'feedId' },
  handler: EndpointHandler,
): LambdaHandler {
  getContainer();
  return (
    middy<JsonEvent, APIGatewayProxyResult, Error, AppContext>()
      .use(lifecycle())
      .use({
        before: (request) => {
          request.context.state.endpoint = options.endpoint;
        },
      })
      .use(jsonBody())
      // Every public body: an optional field sent as null is absent (lib/domain/validation.ts).
      .use({
        before: (request) => {
          request.event.body = nullsAsAbsent(request.event.body);
        },
      })
      .use(searchIdAuth(options.idField))
      .handler((event, context) => handler(event, context, getContainer())) as unknown as LambdaHandler
  );
}

/** Answers 404 for a path parameter too long to name anything (after auth: no probing without a token). */
function pathIdsInRange(): MiddlewareObj<JsonEvent, APIGatewayProxyResult, Error, AppContext> {
  return {
    before: ({ event }) => {
      for (const [name, value] of Object.entries(event.pathParameters ?? {}))
        if (value !== undefined && value.length > MAX_ID_LENGTH)
          throw new NotFoundError(
            'not_found',
            `No ${name} is that long (at most ${MAX_ID_LENGTH} characters).`,
          );
    },
  };
}

/**
 * Refuses query parameters on a route that takes none: one there is a typo or an option the route does
 * not have (`?limit=1` on the feeds list returned every feed; `?force=true` on a DELETE did nothing).
 */
function noQuery(): MiddlewareObj<JsonEvent, APIGatewayProxyResult, Error, AppContext> {
  return { before: ({ event }) => refuseQuery(event.queryStringParameters) };
}

/**
 * An admin endpoint: lifecycle → body → admin token → path ids → query → handler, a POST with an
 * Idempotency-Key at most once per key (lib/http/idempotency.ts). `takesQuery`: the handler parses the
 * query with its own schema; otherwise any query parameter is a 400.
 */
export function adminEndpoint(
  handler: EndpointHandler,
  options: { takesQuery?: boolean } = {},
): LambdaHandler {
  getContainer();
  const chain = middy<JsonEvent, APIGatewayProxyResult, Error, AppContext>()
    .use(lifecycle())
    .use(jsonBody())
    .use(adminAuth())
    .use(pathIdsInRange());
  if (!options.takesQuery) chain.use(noQuery());
  return chain.handler((event, context) => {
    const container = getContainer();
    return idempotent(event, context, container, () => handler(event, context, container));
  }) as unknown as LambdaHandler;
}
