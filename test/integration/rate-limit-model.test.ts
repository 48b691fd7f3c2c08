import type { APIGatewayProxyEvent, APIGatewayProxyResult, Context } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Config } from '#lib/config.ts';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { DynamoDbUsageStore } from '#lib/adapters/dynamodb-usage-store.ts';
import { type Container, configureContainer, getContainer } from '#lib/container.ts';
import { usageContextOf, usageReport } from '#lib/domain/admin/usage.ts';
import { NotFoundError, UnavailableError, ValidationError } from '#lib/domain/errors.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import { publicEndpoint } from '#lib/http/middleware.ts';
import { json } from '#lib/http/responses.ts';
import type { Endpoint, UsageCounters } from '#lib/ports.ts';
import { startTestStores } from '#test/support/embedded-stores.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';

/**
 * A seeded model check of the public API's rate limit and usage meter, through the handlers' middleware
 * and the DynamoDB-protocol server, against a reference written from the README's rules ("Plans", "Usage
 * counts every answer…"), not from lib/domain/rate-window.ts: a request weighs on the limit from its
 * 5-minute step until the 12th step after its own ends; Remaining is what is left after it; Reset is when
 * nothing counted is left; Retry-After is when one more request fits, never after Reset. Requests come from
 * several search ids on every plan (enterprise limits changing now and then), some at one instant, through
 * two stores on one table (two processes, one clock), at times around step edges, UTC midnights, month
 * ends and a leap day; the usage report (days, keys, totals, contexts) is read for random inclusive ranges.
 */
const SEED = Number(process.env.MODEL_SEED ?? 1);
const RUNS = Number(process.env.MODEL_RUNS ?? 4);
const STEPS = Number(process.env.MODEL_STEPS ?? 250);
const STEP_MS = 300_000;
const DAY_MS = 86_400_000;
const PLAN_LIMITS = { free: 5, pro: 12, enterprise: 50 };

let config: Config;
let stop: () => Promise<void>;

beforeAll(async () => {
  ({ config, stop } = await startTestStores());
  configureContainer({ ...config, planLimits: PLAN_LIMITS, logLevel: 'silent' });
});

afterAll(async () => {
  await stop?.();
});

/** The generator seeded, with the draws the model makes: a failing run replays from its seed. */
function random(seed: number) {
  const next = seededRandom(seed);
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)]!;
  return { next, int, pick };
}

type Kind = 'ok' | 'bad' | 'missing' | 'fail' | 'down' | 'foreign' | 'revoked' | 'unknown' | 'twoIds';
const KINDS: readonly Kind[] = ['ok', 'ok', 'ok', 'ok', 'bad', 'missing', 'fail', 'down', 'foreign'];
const RARE: readonly Kind[] = ['revoked', 'unknown', 'twoIds'];
const ENDPOINTS: readonly Endpoint[] = ['search_image', 'detect', 'related', 'root_search'];
const FEED_CREATED = '2020-01-01T00:00:00.000Z';

/** What the handler does for each kind once the middleware lets the request through. */
async function answer(kind: Kind): Promise<APIGatewayProxyResult> {
  if (kind === 'bad') throw new ValidationError('bad', [{ path: 'limit', message: 'bad' }]);
  if (kind === 'missing') throw new NotFoundError('product_not_found', 'none');
  if (kind === 'fail') throw new Error('boom');
  if (kind === 'down') throw new UnavailableError('down');
  return json(200, []);
}

function event(headers: Record<string, string>, body: unknown): APIGatewayProxyEvent {
  return {
    httpMethod: 'POST',
    resource: '/api/v1/search/image',
    path: '/api/v1/search/image',
    headers: { 'content-type': 'application/json', ...headers },
    multiValueHeaders: {},
    queryStringParameters: null,
    multiValueQueryStringParameters: null,
    pathParameters: null,
    stageVariables: null,
    requestContext: { requestId: 'model' } as APIGatewayProxyEvent['requestContext'],
    body: JSON.stringify(body),
    isBase64Encoded: false,
  };
}

/** The reference: admitted times per search id, and the meter per feed, day, endpoint and search id. */
class Reference {
  readonly admitted = new Map<string, number[]>();
  readonly meter = new Map<
    string,
    { feedId: string; day: string; endpoint: Endpoint; searchId: string } & UsageCounters
  >();

  /** Admitted requests that weigh on the limit at `t`: their step is one of the 13 ending with t's. */
  counted(sid: string, t: number): number[] {
    const step = Math.floor(t / STEP_MS);
    return (this.admitted.get(sid) ?? []).filter((a) => Math.floor(a / STEP_MS) >= step - 12);
  }

  /** Seconds from t until nothing admitted so far weighs on the limit. */
  reset(sid: string, t: number): number {
    const counted = this.counted(sid, t);
    if (counted.length === 0) return 0;
    const newest = Math.max(...counted.map((a) => Math.floor(a / STEP_MS)));
    return Math.max(0, Math.ceil(((newest + 13) * STEP_MS - t) / 1000));
  }

  /** Seconds from t until one more request fits (no further admissions), found by trying each edge. */
  retryAfter(sid: string, limit: number, t: number): number {
    for (let edge = Math.floor(t / STEP_MS) + 1; ; edge++) {
      if (this.counted(sid, edge * STEP_MS).length <= limit - 1)
        return Math.max(1, Math.ceil((edge * STEP_MS - t) / 1000));
    }
  }

  /** Related requests per [feed, day, type, domain] (JSON), as the report's contexts sum them. */
  readonly contexts = new Map<string, number>();

  count(feedId: string, sid: string, endpoint: Endpoint, t: number, status: number): void {
    const day = new Date(t).toISOString().slice(0, 10);
    const key = `${feedId}#${day}#${endpoint}#${sid}`;
    const row = this.meter.get(key) ?? {
      feedId,
      day,
      endpoint,
      searchId: sid,
      requests: 0,
      ok: 0,
      clientErrors: 0,
      serverErrors: 0,
      rateLimited: 0,
    };
    row.requests += 1;
    if (status === 429) row.rateLimited += 1;
    else if (status >= 500) row.serverErrors += 1;
    else if (status >= 400) row.clientErrors += 1;
    else row.ok += 1;
    this.meter.set(key, row);
  }
}

interface Setup {
  feeds: Map<string, Feed>;
  keys: Map<string, SearchKey>;
  limitOf(sid: string): number;
}

function setup(run: number): Setup {
  const feeds = new Map<string, Feed>();
  const keys = new Map<string, SearchKey>();
  const plans: [Feed['plan'], number | undefined][] = [
    ['free', undefined],
    ['pro', undefined],
    ['enterprise', 3],
    ['enterprise', 1],
  ];
  plans.forEach(([plan, hourlyLimit], i) => {
    const feedId = `m${SEED}r${run}f${i}`;
    feeds.set(feedId, {
      feedId,
      name: feedId,
      plan,
      ...(hourlyLimit === undefined ? {} : { hourlyLimit }),
      domains: ['shop.example'],
      requireOrigin: false,
      createdAt: FEED_CREATED,
      updatedAt: FEED_CREATED,
    });
    // Two search ids on the first two feeds: each has its own allowance, the feed's meter sums them.
    for (let k = 0; k < (i < 2 ? 2 : 1); k++) {
      const searchId = `vps_m${SEED}r${run}f${i}k${k}`;
      keys.set(searchId, {
        searchId,
        feedId,
        name: 'k',
        createdAt: FEED_CREATED,
        feedCreatedAt: FEED_CREATED,
      });
    }
  });
  const revoked = `vps_m${SEED}r${run}revoked`;
  keys.set(revoked, {
    searchId: revoked,
    feedId: `m${SEED}r${run}f0`,
    name: 'r',
    createdAt: FEED_CREATED,
    feedCreatedAt: FEED_CREATED,
    revokedAt: FEED_CREATED,
  });
  const limitOf = (sid: string) => {
    const feed = feeds.get(keys.get(sid)!.feedId)!;
    return feed.plan === 'enterprise' && feed.hourlyLimit !== undefined
      ? feed.hourlyLimit
      : PLAN_LIMITS[feed.plan];
  };
  return { feeds, keys, limitOf };
}

/** Times around the edges the rules and the meter have: UTC midnights, month and year ends, a leap day. */
const STARTS = [
  '2028-02-28T23:41:00.000Z',
  '2026-12-31T23:44:59.999Z',
  '2027-01-31T23:30:00.000Z',
  '2026-11-30T23:55:00.000Z',
  '2027-02-28T23:50:00.000Z',
];

describe('rate limit and usage meter against the documented rules', () => {
  it('answers every request as the reference does', { timeout: 600_000 }, async () => {
    const differences: string[] = [];
    for (let run = 0; run < RUNS; run++) {
      const r = random(SEED * 1000 + run);
      const { feeds, keys, limitOf } = setup(run);
      const ref = new Reference();
      let clock = Date.parse(r.pick(STARTS));
      const first = clock;
      const c: Container = getContainer();
      const original = c.usage;
      c.clock = { now: () => new Date(clock) };
      c.keys = {
        get: async (sid: string) => keys.get(sid),
        touch: async () => undefined,
      } as unknown as Container['keys'];
      c.feeds = {
        get: async (feedId: string) => feeds.get(feedId),
      } as unknown as Container['feeds'];
      // Two processes (as Lambda runs them) on one table and one clock: with no clock skew they agree.
      const stores = [new DynamoDbUsageStore(createDocumentClient(config), config.tables.usage), c.usage];
      let turn = 0;
      c.usage = {
        consume: (...a: Parameters<Container['usage']['consume']>) => stores[turn++ % 2]!.consume(...a),
        record: (...a: Parameters<Container['usage']['record']>) => stores[turn++ % 2]!.record(...a),
        list: (...a: Parameters<Container['usage']['list']>) => stores[0]!.list(...a),
        listContexts: (...a: Parameters<Container['usage']['listContexts']>) => stores[1]!.listContexts(...a),
        deleteFeed: (...a: Parameters<Container['usage']['deleteFeed']>) => stores[0]!.deleteFeed(...a),
      };
      const handlers = new Map(
        ENDPOINTS.map((endpoint) => [
          endpoint,
          publicEndpoint(
            { endpoint, idField: endpoint === 'root_search' ? 'feedId' : 'searchId' },
            async (e, ctx) => {
              const { kind, context } = e.body as { kind: Kind; context?: { type: string; domain: string } };
              // As functions/related.ts: a valid request's context is metered, whatever its answer.
              if (kind !== 'bad' && endpoint === 'related') ctx.state.usageContext = usageContextOf(context);
              return answer(kind);
            },
          ),
        ]),
      );
      const sids = [...keys.keys()].filter((s) => !keys.get(s)!.revokedAt);
      const log: string[] = [];
      /** Remaining seen last per search id and step: within one step it never goes up. */
      const lastRemaining = new Map<string, number>();
      for (let step = 0; step < STEPS; step++) {
        const move = r.int(10);
        if (move === 0) clock = (Math.floor(clock / STEP_MS) + 1) * STEP_MS;
        else if (move === 1) clock = (Math.floor(clock / STEP_MS) + 1) * STEP_MS - 1;
        else if (move === 2) clock += r.int(3) * 60_000 + 55 * 60_000 + r.int(2) * 1000;
        else if (move === 3) clock = (Math.floor(clock / DAY_MS) + 1) * DAY_MS - r.int(2);
        else if (move === 4) clock += 0;
        else clock += r.int(40_000);
        const t = clock;
        // Now and then an enterprise feed's limit changes: the limit in force applies at once.
        if (r.int(25) === 0) {
          const feed = feeds.get(`m${SEED}r${run}f${2 + r.int(2)}`)!;
          feed.hourlyLimit = 1 + r.int(6);
        }
        // One to five requests at the same instant, sent together.
        const batch = Array.from({ length: 1 + (r.int(3) === 0 ? r.int(5) : 0) }, () => ({
          sid: r.pick(sids),
          endpoint: r.pick(ENDPOINTS),
          kind: r.int(12) === 0 ? r.pick(RARE) : r.pick(KINDS),
        }));
        const answers = await Promise.all(
          batch.map(async ({ sid, endpoint, kind }) => {
            const idField = endpoint === 'root_search' ? 'feedId' : 'searchId';
            const id =
              kind === 'revoked' ? `vps_m${SEED}r${run}revoked` : kind === 'unknown' ? 'vps_nobody' : sid;
            const headers: Record<string, string> =
              kind === 'foreign'
                ? { origin: 'https://elsewhere.example' }
                : r.int(2)
                  ? { origin: 'https://shop.example' }
                  : {};
            const body: Record<string, unknown> = { kind };
            if (endpoint === 'related' && r.int(2))
              body.context = {
                type: r.pick(['Product Page', 'cart', '']),
                domain: r.pick(['shop.example', '']),
              };
            if (kind === 'twoIds') {
              headers.authorization = `Bearer ${id}`;
              body[idField] = `${id}x`;
            } else if (r.int(2)) headers.authorization = `Bearer ${id}`;
            else body[idField] = id;
            const res = await handlers.get(endpoint)!(event(headers, body), { awsRequestId: 'm' } as Context);
            return { sid, endpoint, kind, res, body };
          }),
        );
        // The reference, in the order the answers' counts show: concurrent admissions of one search id at
        // one instant are interchangeable, so they are taken in order of decreasing Remaining.
        const order = answers
          .map((a, i) => ({ ...a, i }))
          .sort((a, b) => {
            const rem = (x: typeof a) =>
              x.res.statusCode === 429 ? -1 : Number(x.res.headers?.['RateLimit-Remaining'] ?? -2);
            return rem(b) - rem(a);
          });
        for (const a of order) {
          const { sid, endpoint, kind, res } = a;
          const h = (res.headers ?? {}) as Record<string, string>;
          const where = `run ${run} step ${step} @${new Date(t).toISOString()} ${sid} ${endpoint} ${kind}`;
          const got = [
            res.statusCode,
            h['RateLimit-Limit'],
            h['RateLimit-Remaining'],
            h['RateLimit-Reset'],
            h['Retry-After'],
          ].join(' ');
          log.push(`${where} → ${got}`);
          let want: string;
          const feedId = keys.get(sid)!.feedId;
          if (kind === 'revoked' || kind === 'unknown' || kind === 'twoIds') {
            want = [kind === 'twoIds' ? 400 : kind === 'revoked' ? 403 : 401, '', '', '', ''].join(' ');
          } else if (kind === 'foreign') {
            want = [403, '', '', '', ''].join(' ');
            ref.count(feedId, sid, endpoint, t, 403);
          } else {
            const limit = limitOf(sid);
            const counted = ref.counted(sid, t).length;
            if (counted < limit) {
              ref.admitted.set(sid, [...(ref.admitted.get(sid) ?? []), t]);
              const status = { ok: 200, bad: 400, missing: 404, fail: 500, down: 503 }[kind as 'ok'];
              want = [status, limit, limit - counted - 1, ref.reset(sid, t), status === 503 ? 5 : ''].join(
                ' ',
              );
              ref.count(feedId, sid, endpoint, t, status);
              const context = (a.body as { context?: { type: string; domain: string } }).context;
              const metered = kind !== 'bad' && endpoint === 'related' ? usageContextOf(context) : undefined;
              if (metered) {
                const key = JSON.stringify([
                  feedId,
                  new Date(t).toISOString().slice(0, 10),
                  metered.type,
                  metered.domain,
                ]);
                ref.contexts.set(key, (ref.contexts.get(key) ?? 0) + 1);
              }
            } else {
              want = [429, limit, 0, ref.reset(sid, t), ref.retryAfter(sid, limit, t)].join(' ');
              ref.count(feedId, sid, endpoint, t, 429);
            }
          }
          if (got !== want) differences.push(`${where}: got ${got}, want ${want}`);
          // Properties the README states outright, checked on the answer itself.
          const remaining = h['RateLimit-Remaining'];
          if (remaining !== undefined) {
            const stepKey = `${sid}#${Math.floor(t / STEP_MS)}#${h['RateLimit-Limit']}`;
            const seen = lastRemaining.get(stepKey);
            if (Number(remaining) < 0) differences.push(`${where}: Remaining ${remaining} < 0`);
            if (seen !== undefined && Number(remaining) > seen)
              differences.push(`${where}: Remaining went up within a step (${seen} → ${remaining})`);
            lastRemaining.set(stepKey, Number(remaining));
            if (Number(h['RateLimit-Reset']) > 3900) differences.push(`${where}: Reset over 65 minutes`);
          }
          if (res.statusCode === 429) {
            const retry = Number(h['Retry-After']);
            if (retry > Number(h['RateLimit-Reset'])) differences.push(`${where}: Retry-After after Reset`);
            if (ref.counted(sid, t + retry * 1000).length >= limitOf(sid))
              differences.push(`${where}: still refused ${retry} s later`);
          }
        }
        if (differences.length > 0) break;
      }
      // The meter, as the usage report gives it, for random inclusive ranges of days.
      const days = (Math.floor(clock / DAY_MS) - Math.floor(first / DAY_MS)) | 0;
      for (const feedId of feeds.keys()) {
        for (let q = 0; q < 6 && differences.length === 0; q++) {
          const a = Math.floor(first / DAY_MS) - 1 + r.int(days + 3);
          const b = a + r.int(days + 2);
          const day = (n: number) => new Date(n * DAY_MS).toISOString().slice(0, 10);
          const query = q === 0 ? {} : { from: day(a), to: day(b) };
          const from = query.from ?? day(Math.floor(clock / DAY_MS) - 29);
          const to = query.to ?? day(Math.floor(clock / DAY_MS));
          const report = await usageReport(c, feedId, query);
          const rows = [...ref.meter.values()].filter(
            (x) => x.feedId === feedId && x.day >= from && x.day <= to,
          );
          const perDay = new Map<string, UsageCounters & { day: string; endpoint: Endpoint }>();
          for (const row of rows) {
            const k = `${row.day}#${row.endpoint}`;
            const into = perDay.get(k) ?? {
              day: row.day,
              endpoint: row.endpoint,
              requests: 0,
              ok: 0,
              clientErrors: 0,
              serverErrors: 0,
              rateLimited: 0,
            };
            for (const f of ['requests', 'ok', 'clientErrors', 'serverErrors', 'rateLimited'] as const)
              into[f] += row[f];
            perDay.set(k, into);
          }
          const want = [...perDay.values()].sort(
            (x, y) => x.day.localeCompare(y.day) || x.endpoint.localeCompare(y.endpoint),
          );
          // Per search id and in total over the range too (the report orders keys by requests; ties any way).
          const fields = ['requests', 'ok', 'clientErrors', 'serverErrors', 'rateLimited'] as const;
          const sum = (of: UsageCounters[]) =>
            Object.fromEntries(fields.map((f) => [f, of.reduce((n, x) => n + x[f], 0)]));
          const ids = [...new Set(rows.map((x) => x.searchId))].sort();
          const wantKeys = ids.map((id) => ({ searchId: id, ...sum(rows.filter((x) => x.searchId === id)) }));
          const gotKeys = [...report.keys].sort((x, y) => x.searchId.localeCompare(y.searchId));
          const contexts = new Map<string, { type: string; domain: string; requests: number }>();
          for (const [key, n] of ref.contexts) {
            const [f, d, type, domain] = JSON.parse(key) as string[];
            if (f !== feedId || d! < from || d! > to) continue;
            const k = JSON.stringify([type, domain]);
            const into = contexts.get(k) ?? { type: type!, domain: domain!, requests: 0 };
            into.requests += n;
            contexts.set(k, into);
          }
          const wantContexts = [...contexts.values()].sort(
            (x, y) =>
              y.requests - x.requests || x.type.localeCompare(y.type) || x.domain.localeCompare(y.domain),
          );
          const got = JSON.stringify({
            from: report.from,
            to: report.to,
            days: report.days,
            keys: gotKeys,
            contexts: report.contexts,
          });
          const expected = JSON.stringify({ from, to, days: want, keys: wantKeys, contexts: wantContexts });
          if (JSON.stringify(report.totals) !== JSON.stringify(sum(rows)))
            differences.push(
              `run ${run} report ${feedId} ${from}..${to}: totals ${JSON.stringify(report.totals)}`,
            );
          if (got !== expected)
            differences.push(`run ${run} report ${feedId} ${from}..${to}: got ${got}, want ${expected}`);
        }
      }
      c.usage = original;
      const tally = new Map<string, number>();
      for (const line of log) {
        const status = line.split(' → ')[1]!.split(' ')[0]!;
        tally.set(status, (tally.get(status) ?? 0) + 1);
      }
      console.log(`run ${run}: ${JSON.stringify(Object.fromEntries(tally))}`);
      if (differences.length > 0) {
        console.log(log.slice(-40).join('\n'));
        break;
      }
    }
    expect(differences.slice(0, 10)).toEqual([]);
  });
});
