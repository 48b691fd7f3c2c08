import { createHash, randomUUID } from 'node:crypto';
import type { APIGatewayProxyResult } from 'aws-lambda';
import type { Container } from '#lib/container.ts';
import { DomainError, ValidationError } from '#lib/domain/errors.ts';
import type { AppContext } from '#lib/http/context.ts';
import type { JsonEvent } from '#lib/http/middleware.ts';
import { stringHeaders } from '#lib/http/responses.ts';
import { errorFields } from '#lib/log.ts';
import type { StoredResponse } from '#lib/ports.ts';

/** Header naming a retried request (IETF draft-ietf-httpapi-idempotency-key-header; Stripe's). */
export const IDEMPOTENCY_HEADER = 'Idempotency-Key';
/** Set on an answer given again from the first request's (Stripe's name). */
export const REPLAYED_HEADER = 'Idempotent-Replayed';
/** On such an answer, the request id of the request that made it (Stripe's name), to find it in the logs. */
export const ORIGINAL_REQUEST_HEADER = 'Original-Request';

/** How long a key's answer is kept: a client retries within minutes; Stripe keeps a day too. */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;
/**
 * How long a running request holds its key. Past the gateway's 29-s answer and the admin functions' time,
 * so a live request is never run twice; a retry after a crashed one waits at most this long (409 meanwhile).
 */
export const IDEMPOTENCY_LOCK_MS = 60_000;
/** Answers larger than this are not kept (an item holds at most 400 KB; admin creates answer ~1 KB). */
const MAX_STORED_BODY = 256 * 1024;
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

type Run = () => Promise<APIGatewayProxyResult>;

/**
 * Runs an admin POST at most once per Idempotency-Key: the first request with a key runs, and its 2xx answer
 * is kept a day and given again (with `Idempotent-Replayed: true`) to every request with the same key,
 * path and body. A request without the header runs as before. Only successes are kept: an error created
 * nothing, so its retry runs again (and may succeed once the cause is fixed, a 503 most of all).
 */
export async function idempotent(
  event: JsonEvent,
  context: AppContext,
  container: Container,
  run: Run,
): Promise<APIGatewayProxyResult> {
  const header = event.headers['idempotency-key'];
  if (event.httpMethod !== 'POST' || header === undefined) return run();
  if (!KEY_PATTERN.test(header)) {
    throw new ValidationError(
      `Invalid ${IDEMPOTENCY_HEADER}: 1 to 255 visible ASCII characters (a UUID, for instance).`,
      [{ path: IDEMPOTENCY_HEADER, message: 'expected 1 to 255 visible ASCII characters' }],
    );
  }
  // One key space: the admin API has one tenant, the operator, whatever credentials carry the retry (an
  // IAM session renewed between two tries has another ARN). The IETF draft's quoted form is the same key.
  const key = /^".+"$/.test(header) ? header.slice(1, -1) : header;
  const owner = `${context.state.requestId} ${randomUUID()}`;
  const claim = await container.idempotency.begin(key, {
    fingerprint: fingerprintOf(event),
    owner,
    now: container.clock.now(),
    lockMs: IDEMPOTENCY_LOCK_MS,
    ttlMs: IDEMPOTENCY_TTL_MS,
  });
  switch (claim.kind) {
    case 'replay': {
      const gone = await feedGoneSince(event, claim.response, container);
      if (gone !== undefined) {
        throw new DomainError(
          'idempotency_key_reused',
          `This ${IDEMPOTENCY_HEADER} was answered for feed ${gone}, which has been deleted since ` +
            '(or deleted and created again): its answer names what no longer exists. Send a new key.',
        );
      }
      const { feedCreatedAt: _feedCreatedAt, ...response } = claim.response;
      return { ...response, headers: { ...response.headers, [REPLAYED_HEADER]: 'true' } };
    }
    case 'in_progress':
      throw new DomainError(
        'idempotency_key_in_use',
        `A request with this ${IDEMPOTENCY_HEADER} is still running; retry once it has been answered.`,
      );
    case 'mismatch':
      throw new DomainError(
        'idempotency_key_reused',
        `This ${IDEMPOTENCY_HEADER} was used for another request (another path or body); ` +
          'send a new key with a new request.',
      );
    case 'started':
      break;
  }
  let response: APIGatewayProxyResult;
  // The feed the request works on, as it is before the work (a deletion and re-creation during it then
  // makes its answer one for the feed before, refused on a replay rather than given for the new one).
  let feedCreatedAt: string | undefined;
  try {
    const feedId = event.pathParameters?.feedId;
    if (feedId !== undefined) feedCreatedAt = (await container.feeds.get(feedId, { fresh: true }))?.createdAt;
    response = await run();
  } catch (error) {
    await giveBack(container, context, key, owner);
    throw error;
  }
  const ok = response.statusCode >= 200 && response.statusCode < 300;
  if (!ok || Buffer.byteLength(response.body) > MAX_STORED_BODY) {
    await giveBack(container, context, key, owner);
    return response;
  }
  // (A feed creation's answer is the feed: its own createdAt.)
  const answeredFeed = feedCreatedAt ?? answerField(response.body, 'createdAt');
  try {
    await container.idempotency.finish(key, owner, {
      statusCode: response.statusCode,
      headers: { ...stringHeaders(response.headers), [ORIGINAL_REQUEST_HEADER]: context.state.requestId },
      body: response.body,
      ...(answeredFeed === undefined ? {} : { feedCreatedAt: answeredFeed }),
    });
  } catch (error) {
    // The request's work is done: answer it. A retry within the lock gets 409, after it runs again.
    context.state.logger.error('idempotency record not saved', errorFields(error));
  }
  return response;
}

/**
 * The feed a kept answer was given for (the path's, or the one a feed creation made), when that feed has
 * been deleted since, or deleted and created again under its id (another createdAt than the answer's
 * feed: compared for equality, not by time, so no two functions' clocks are compared): the answer then
 * names a search id, an import or a feed that no longer exists, and a retry must not be told it
 * succeeded. Undefined when the feed is the one the answer was given for (or the answer names none). One
 * consistent read, on replays only. (An answer kept before `feedCreatedAt` was recorded is checked for its
 * feed's existence alone.)
 */
async function feedGoneSince(
  event: JsonEvent,
  response: StoredResponse,
  container: Container,
): Promise<string | undefined> {
  const feedId = event.pathParameters?.feedId ?? answerField(response.body, 'feedId');
  if (feedId === undefined) return undefined;
  const feed = await container.feeds.get(feedId, { fresh: true });
  const recreated = response.feedCreatedAt !== undefined && feed?.createdAt !== response.feedCreatedAt;
  return !feed || feed.deletingAt || recreated ? feedId : undefined;
}

/** A string field of a JSON answer body, if it has one. */
function answerField(body: string, name: string): string | undefined {
  try {
    const value = (JSON.parse(body) as Record<string, unknown> | null)?.[name];
    return typeof value === 'string' ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The request a key stands for: its method, route and path parameters, and its body as JSON with sorted
 * keys (a client library that re-serialises a retry may order the fields otherwise, or add a trailing slash).
 */
function fingerprintOf(event: JsonEvent): string {
  const route = `${event.httpMethod} ${event.resource} ${canonicalJson(event.pathParameters ?? {})}`;
  return createHash('sha256')
    .update(`${route}\n${canonicalJson(event.body ?? null)}`)
    .digest('hex');
}

/** Deeper than any admin body (a few levels); a deeper one is refused before it can exhaust the stack. */
const MAX_BODY_DEPTH = 64;

function canonicalJson(value: unknown, depth = 0): string {
  if (depth > MAX_BODY_DEPTH) {
    throw new ValidationError(`Request body is nested more than ${MAX_BODY_DEPTH} levels deep.`, [
      { path: '(body)', message: `nested more than ${MAX_BODY_DEPTH} levels deep` },
    ]);
  }
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item, depth + 1)).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, item]) => item !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const members = entries.map(
      ([name, item]) => `${JSON.stringify(name)}:${canonicalJson(item, depth + 1)}`,
    );
    return `{${members.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

async function giveBack(
  container: Container,
  context: AppContext,
  key: string,
  owner: string,
): Promise<void> {
  try {
    await container.idempotency.abandon(key, owner);
  } catch (error) {
    // The claim then runs out with its lock; the request's own outcome is what the caller needs.
    context.state.logger.error('idempotency claim not released', errorFields(error));
  }
}
