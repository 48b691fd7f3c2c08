import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile } from 'node:fs/promises';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { App, Stack } from 'aws-cdk-lib';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { Construct } from 'constructs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { bindBucket, bindTable, type TableName } from '../../infra/constructs/bindings.ts';
import { accessOf, type AccessProfile, IMPORT_WORKER_PROFILE } from '../../infra/route-access.ts';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { TABLES } from '#lib/adapters/dynamodb-tables.ts';
import { DynamoDbUsageStore } from '#lib/adapters/dynamodb-usage-store.ts';
import { matchRoute, ROUTES } from '#lib/http/routes.ts';
import type { UsageStore } from '#lib/ports.ts';
import { startTestStack, type TestResponse, type TestStack } from '#test/support/local-stack.ts';

/**
 * The DynamoDB and S3 calls of every function, against the IAM grants it gets in AWS: each route's
 * function (infra/route-access.ts accessOf) and the import worker (IMPORT_WORKER_PROFILE), the grants made
 * by the real binders (infra/constructs/bindings.ts bindTable, bindBucket). Local mode has no IAM: a call
 * outside them answers here and is AccessDenied there, on every request (the rate limit's Query of the
 * usage table was such a call).
 *
 * Every route is called over HTTP, one request at a time, and the calls made from its start until the
 * stores are quiet are its function's. What a request hands to the import runner (an import, a feed
 * deletion that outlasts it) is held back and run once the request is over, its calls the worker's, as
 * the S3 event starts the worker in AWS. Local mode uses the S3 adapter against the local S3-protocol
 * server, so the S3 calls are the ones AWS would get. Not checked here: the search domain (a local index
 * here), the API key registry (none locally) and the model layer.
 *
 * The functions share this process, not their memory: the auth and feature caches are off, and each
 * function has a usage store of its own (the rate limit reads a search id's finished buckets once per
 * process and bucket), so each makes the reads its own process would.
 */
let stack: TestStack;
let feedServer: Server;
let feedUrl: string;
let feedFile = '';
let photo: string;

const WORKER = 'ImportWorker';
/** Calls made while no request or runner window was open: something ran in the background. */
const OUTSIDE = '(outside any request)';
const ACCOUNT = '111111111111';
const REGION = 'eu-west-1';

interface Call {
  fn: string;
  action: string;
  resource: string;
  /** ListBucket's prefix (the s3:prefix condition key). */
  prefix?: string;
  /** A single-table call's partition key value (the dynamodb:LeadingKeys condition key). */
  leadingKey?: string;
}

const calls: Call[] = [];
let current: string | undefined;
let inFlight = 0;
/** Jobs the requests handed to the import runner, run after them. */
const handedOver: [feedId: string, jobId: string][] = [];
let runJob: (feedId: string, jobId: string) => Promise<void>;
/** Each function's usage store (its per-process state), on a client of their own. */
const usageStores = new Map<string, UsageStore>();
let usageClient: ReturnType<typeof createDocumentClient> | undefined;

const tableArn = (table: string) => `arn:aws:dynamodb:${REGION}:${ACCOUNT}:table/${table}`;
const objectArn = (bucket: string, key: string) => `arn:aws:s3:::${bucket}/${key}`;

/**
 * The partition key value a Get, Put, Update, Delete or Query names (its Key, Item or key condition), as
 * IAM's dynamodb:LeadingKeys sees it; undefined for a Scan.
 */
function leadingKeyOf(
  table: string | undefined,
  index: string | undefined,
  input: Record<string, unknown>,
): string | undefined {
  const definition = TABLES.find((candidate) => candidate.configKey === table);
  const keyName = index
    ? definition?.indexes.find((candidate) => candidate.name === index)?.partitionKey
    : definition?.partitionKey;
  if (!keyName) return undefined;
  const item = (input.Key ?? input.Item) as Record<string, unknown> | undefined;
  if (item) return String(item[keyName]);
  const condition = input.KeyConditionExpression as string | undefined;
  if (!condition) return undefined;
  const names = (input.ExpressionAttributeNames ?? {}) as Record<string, string>;
  const values = (input.ExpressionAttributeValues ?? {}) as Record<string, unknown>;
  for (const [, name, placeholder] of condition.matchAll(/([#\w]+)\s*=\s*(:\w+)/g))
    if ((names[name!] ?? name) === keyName) return String(values[placeholder!]);
  return undefined;
}

/** The document client's commands as IAM actions on table and index ARNs. */
function dynamoCalls(command: { constructor: { name: string }; input: Record<string, unknown> }): Call[] {
  const tableOf = new Map(Object.entries(stack.config.tables).map(([name, table]) => [table, name]));
  const arn = (table: string, index?: unknown) =>
    `${tableArn(tableOf.get(table) ?? `unknown:${table}`)}${index ? `/index/${String(index)}` : ''}`;
  const name = command.constructor.name;
  const input = command.input;
  const single: Record<string, string> = {
    GetCommand: 'dynamodb:GetItem',
    QueryCommand: 'dynamodb:Query',
    ScanCommand: 'dynamodb:Scan',
    PutCommand: 'dynamodb:PutItem',
    UpdateCommand: 'dynamodb:UpdateItem',
    DeleteCommand: 'dynamodb:DeleteItem',
  };
  const batch: Record<string, string> = {
    BatchGetCommand: 'dynamodb:BatchGetItem',
    BatchWriteCommand: 'dynamodb:BatchWriteItem',
  };
  const transact: Record<string, string> = {
    Get: 'dynamodb:GetItem',
    Put: 'dynamodb:PutItem',
    Update: 'dynamodb:UpdateItem',
    Delete: 'dynamodb:DeleteItem',
    ConditionCheck: 'dynamodb:ConditionCheckItem',
  };
  const fn = current ?? OUTSIDE;
  if (single[name]) {
    const leadingKey = leadingKeyOf(
      tableOf.get(input.TableName as string),
      input.IndexName as string | undefined,
      input,
    );
    return [
      {
        fn,
        action: single[name],
        resource: arn(input.TableName as string, input.IndexName),
        ...(leadingKey !== undefined ? { leadingKey } : {}),
      },
    ];
  }
  if (batch[name])
    return Object.keys(input.RequestItems as object).map((table) => ({
      fn,
      action: batch[name]!,
      resource: arn(table),
    }));
  if (name === 'TransactWriteCommand' || name === 'TransactGetCommand')
    return (input.TransactItems as Record<string, { TableName: string }>[]).flatMap((item) =>
      Object.entries(item).map(([kind, op]) => ({
        fn,
        action: transact[kind] ?? kind,
        resource: arn(op.TableName),
      })),
    );
  return [{ fn, action: `dynamodb:(${name})`, resource: arn(String(input.TableName)) }];
}

/** The S3 client's commands as IAM actions on object and bucket ARNs. */
function s3Calls(command: { constructor: { name: string }; input: Record<string, unknown> }): Call[] {
  const name = command.constructor.name;
  const input = command.input;
  const bucket = input.Bucket as string;
  const fn = current ?? OUTSIDE;
  const onObject: Record<string, string> = {
    GetObjectCommand: 's3:GetObject',
    HeadObjectCommand: 's3:GetObject',
    PutObjectCommand: 's3:PutObject',
    CreateMultipartUploadCommand: 's3:PutObject',
    UploadPartCommand: 's3:PutObject',
    CompleteMultipartUploadCommand: 's3:PutObject',
    AbortMultipartUploadCommand: 's3:AbortMultipartUpload',
    DeleteObjectCommand: 's3:DeleteObject',
  };
  if (onObject[name])
    return [{ fn, action: onObject[name], resource: objectArn(bucket, input.Key as string) }];
  if (name === 'DeleteObjectsCommand')
    // One s3:DeleteObject per key (S3 answers a denied key in the batch's Errors).
    return (input.Delete as { Objects: { Key: string }[] }).Objects.map(({ Key }) => ({
      fn,
      action: 's3:DeleteObject',
      resource: objectArn(bucket, Key),
    }));
  if (name === 'ListObjectsV2Command')
    return [
      {
        fn,
        action: 's3:ListBucket',
        resource: `arn:aws:s3:::${bucket}`,
        prefix: (input.Prefix as string) ?? '',
      },
    ];
  return [{ fn, action: `s3:(${name})`, resource: `arn:aws:s3:::${bucket}` }];
}

/** Records each call of `prototype.send` as it passes (nothing is changed) and counts those in flight. */
function recordSends(
  prototype: { send: (...args: never[]) => unknown },
  callsOf: (command: { constructor: { name: string }; input: Record<string, unknown> }) => Call[],
): void {
  const original = prototype.send as (...args: unknown[]) => unknown;
  vi.spyOn(prototype, 'send').mockImplementation(function (this: unknown, ...args: unknown[]) {
    calls.push(...callsOf(args[0] as Parameters<typeof callsOf>[0]));
    const answer = original.apply(this, args);
    inFlight += 1;
    const done = () => {
      inFlight -= 1;
    };
    Promise.resolve(answer).then(done, done);
    return answer as never;
  });
}

/** Until no call is in flight and none started for a while (a request's tail, a runner's last writes). */
async function quiet(): Promise<void> {
  let seen = -1;
  while (inFlight > 0 || calls.length !== seen) {
    seen = calls.length;
    await new Promise((resolve) => setTimeout(resolve, 30));
  }
}

/** Runs `act` with every call it makes attributed to `fn`. */
async function as<T>(fn: string, act: () => Promise<T>): Promise<T> {
  await quiet();
  let usage = usageStores.get(fn);
  if (!usage) {
    usageClient ??= createDocumentClient(stack.config);
    usage = new DynamoDbUsageStore(usageClient, stack.config.tables.usage);
    usageStores.set(fn, usage);
  }
  stack.container.usage = usage;
  current = fn;
  try {
    const result = await act();
    await quiet();
    return result;
  } finally {
    current = undefined;
  }
}

/**
 * One request, its calls the function of the route it matches (the route table's), then what it handed
 * to the import runner, the worker's; `expected` is its status.
 */
async function request(
  expected: number,
  method: string,
  path: string,
  options: { body?: unknown; headers?: Record<string, string> } = {},
): Promise<TestResponse> {
  const route = matchRoute(method, path.split('?')[0]!).match?.route;
  if (!route) throw new Error(`No route answers ${method} ${path}`);
  const admin: Record<string, string> =
    route.access === 'admin' ? { authorization: `Bearer ${stack.adminToken}` } : {};
  const headers = { ...admin, ...options.headers };
  const answer = await as(route.name, () => stack.call(method, path, { ...options, headers }));
  while (handedOver.length > 0) {
    const jobs = handedOver.splice(0);
    await as(WORKER, async () => {
      for (const [feedId, jobId] of jobs) await runJob(feedId, jobId);
      await stack.importsIdle();
    });
  }
  expect(answer.status, `${method} ${path}: ${JSON.stringify(answer.body)}`).toBe(expected);
  return answer;
}

// ---- The grants, as the binders make them ------------------------------------------------------------

interface Statement {
  actions: string[];
  resources: string[];
  conditions: Record<string, Record<string, string[]>>;
}

/** Stands in for a Lambda function: keeps the statements the binders add to its role. */
class RoleRecorder extends Construct {
  readonly statements: iam.PolicyStatement[] = [];
  addEnvironment(): this {
    return this;
  }
  addToRolePolicy(statement: iam.PolicyStatement): void {
    this.statements.push(statement);
  }
}

const cdkStack = new Stack(new App(), 'Grants', { env: { account: ACCOUNT, region: REGION } });
const grantsCache = new Map<AccessProfile, Statement[]>();

/** The IAM statements of a profile's tables and bucket prefixes, from bindTable and bindBucket. */
function grantsOf(profile: AccessProfile, bucket: string): Statement[] {
  const cached = grantsCache.get(profile);
  if (cached) return cached;
  const role = new RoleRecorder(cdkStack, `Fn${grantsCache.size}`);
  const fn = role as unknown as lambda.Function;
  for (const [name, access] of Object.entries(profile.tables) as [
    TableName,
    NonNullable<AccessProfile['tables'][TableName]>,
  ][]) {
    const definition = TABLES.find((table) => table.configKey === name)!;
    bindTable(fn, { table: { tableName: name, tableArn: tableArn(name) } as never, definition }, access);
  }
  for (const { access, prefix } of profile.buckets ?? [])
    bindBucket(fn, { bucket: { bucketName: bucket }, name: bucket }, access, prefix);
  const statements = role.statements.map((statement) => {
    const json = flatten(cdkStack.resolve(statement.toStatementJson())) as Record<string, unknown>;
    expect(json.Effect).toBe('Allow');
    return {
      actions: list(json.Action),
      resources: list(json.Resource),
      conditions: (json.Condition ?? {}) as Statement['conditions'],
    };
  });
  grantsCache.set(profile, statements);
  return statements;
}

/** Resolved CloudFormation values as plain strings (the partition is `aws`). */
function flatten(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(flatten);
  if (node === null || typeof node !== 'object') return node;
  const value = node as Record<string, unknown>;
  if (value['Fn::Join']) {
    const [delimiter, items] = value['Fn::Join'] as [string, unknown[]];
    return items.map(flatten).join(delimiter);
  }
  if (value.Ref === 'AWS::Partition') return 'aws';
  if (value.Ref !== undefined) throw new Error(`Unexpected reference in a grant: ${JSON.stringify(node)}`);
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, flatten(item)]));
}

const glob = (pattern: string) =>
  new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  );

function allowed(call: Call, statements: Statement[]): boolean {
  return statements.some(
    (statement) =>
      statement.actions.some((action) => glob(action).test(call.action)) &&
      statement.resources.some((resource) => glob(resource).test(call.resource)) &&
      Object.entries(statement.conditions).every(([operator, keys]) => {
        // The conditions the binders write: ListBucket under the granted prefix, and the rate-limit
        // partitions of the usage table's Query (ForAllValues: every partition key the call names).
        if (operator !== 'StringLike' && operator !== 'ForAllValues:StringLike') return false;
        return Object.entries(keys).every(([key, patterns]) => {
          const value =
            key === 's3:prefix' ? call.prefix : key === 'dynamodb:LeadingKeys' ? call.leadingKey : undefined;
          return value !== undefined && list(patterns).some((pattern) => glob(pattern).test(value));
        });
      }),
  );
}

const list = (value: unknown): string[] =>
  value === undefined ? [] : Array.isArray(value) ? (value as string[]) : [value as string];

function profileOf(fn: string): AccessProfile {
  if (fn === WORKER) return IMPORT_WORKER_PROFILE;
  const route = ROUTES.find((r) => r.name === fn);
  if (!route) throw new Error(`No function ${fn}`);
  return accessOf(route).profile;
}

// ---- The scenario: every route, and what the runner does for them --------------------------------------

const link = (name: string) => `${stack.url}/demo/images/${name}.webp`;
const csv = (rows: [id: string, image: string][]) =>
  `id,title,image_link,price\n${rows.map(([id, image]) => `${id},${id},${link(image)},10 USD`).join('\n')}\n`;

beforeAll(async () => {
  stack = await startTestStack({
    DEMO_SEED: 'false',
    AUTH_CACHE_TTL_SECONDS: '0',
    FEATURE_CACHE_ITEMS: '0',
    MIN_SCORE: '0',
  });
  photo = (await readFile(new URL('../../demo/images/tools-hammer3.webp', import.meta.url))).toString(
    'base64',
  );
  feedServer = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/csv' }).end(feedFile);
  });
  await new Promise<void>((resolve) => feedServer.listen(0, '127.0.0.1', resolve));
  feedUrl = `http://127.0.0.1:${(feedServer.address() as AddressInfo).port}/feed.csv`;

  const dispatcher = stack.container.dispatcher;
  runJob = dispatcher.dispatch.bind(dispatcher);
  vi.spyOn(dispatcher, 'dispatch').mockImplementation(async (feedId: string, jobId: string) => {
    handedOver.push([feedId, jobId]);
  });
  await stack.importsIdle();
  // (Local mode's own removal of expired items at start is no function's: it runs in no AWS function.)
  await stack.expiredSwept();
  const usage = stack.container.usage;
  recordSends(DynamoDBDocumentClient.prototype, dynamoCalls);
  recordSends(S3Client.prototype, s3Calls);

  const shop = 'grants-shop';
  const spare = 'grants-spare';
  const once = (key: string) => ({ 'idempotency-key': key });
  // Feeds; the same Idempotency-Key again gets the kept answer.
  const feed = { feedId: shop, name: 'Grants', plan: 'pro' };
  await request(201, 'POST', '/admin/v1/feeds', { body: feed, headers: once('feed') });
  await request(201, 'POST', '/admin/v1/feeds', { body: feed, headers: once('feed') });
  await request(201, 'POST', '/admin/v1/feeds', { body: { feedId: spare, name: 'Spare' } });
  await request(200, 'GET', '/admin/v1/feeds');
  await request(200, 'GET', `/admin/v1/feeds/${shop}`);
  // Search ids
  const key = await request(201, 'POST', `/admin/v1/feeds/${shop}/keys`, {
    body: { name: 'web' },
    headers: once('key'),
  });
  const searchId = key.body.searchId as string;
  const spareKey = await request(201, 'POST', `/admin/v1/feeds/${spare}/keys`, { body: {} });
  const revoked = await request(201, 'POST', `/admin/v1/feeds/${shop}/keys`, { body: {} });
  await request(200, 'GET', `/admin/v1/feeds/${shop}/keys`);
  await request(200, 'DELETE', `/admin/v1/keys/${revoked.body.searchId}`);
  // A plan change moves the feed's keys to the other usage plan (it lists them).
  await request(200, 'PATCH', `/admin/v1/feeds/${shop}`, { body: { plan: 'enterprise', name: 'Shop' } });
  // Imports: inline content (stored by the request)...
  const rows: [string, string][] = [
    ['hammer', 'tools-hammer3'],
    ['pliers', 'tools-plier1'],
    ['pan', 'others-pan'],
  ];
  const inline = await request(202, 'POST', `/admin/v1/feeds/${shop}/imports`, {
    body: { format: 'csv', content: csv(rows) },
    headers: once('import'),
  });
  await request(202, 'POST', `/admin/v1/feeds/${spare}/imports`, {
    body: { format: 'csv', content: csv(rows.slice(0, 1)) },
  });
  const imported = await request(200, 'GET', `/admin/v1/feeds/${shop}/imports/${inline.body.importId}`);
  expect(imported.body).toMatchObject({ status: 'succeeded', embedded: 3 });
  await request(200, 'GET', `/admin/v1/feeds/${shop}/imports?limit=5`);
  await request(200, 'GET', `/admin/v1/feeds/${shop}/products?limit=5`);
  // The public endpoints, as a widget calls them (the header and the body forms of the id)
  const auth = { authorization: `Bearer ${searchId}` };
  await request(200, 'POST', '/api/v1/search/image', { body: { imageData: photo }, headers: auth });
  await request(200, 'POST', '/api/v1/detect', {
    body: { imageData: photo, action: 'OD+SEARCH' },
    headers: auth,
  });
  await request(200, 'POST', '/api/v1/related', {
    body: { productId: 'hammer', context: { type: 'pdp', domain: 'shop.example' } },
    headers: auth,
  });
  await request(200, 'POST', '/', { body: { imageData: photo, limit: 5, offset: 0, feedId: searchId } });
  await request(200, 'GET', `/admin/v1/feeds/${shop}/usage`);
  // ...and a fetched file (stored by the worker) without one of the products (removed by the worker).
  feedFile = csv(rows.slice(0, 2));
  const fetched = await request(202, 'POST', `/admin/v1/feeds/${shop}/imports`, {
    body: { url: feedUrl, format: 'csv' },
  });
  const refreshed = await request(200, 'GET', `/admin/v1/feeds/${shop}/imports/${fetched.body.importId}`);
  expect(refreshed.body).toMatchObject({ status: 'succeeded', removed: 1 });
  // Deletions: one within its request, one handed over to the runner (as a large feed's is); both feeds
  // have every kind of item (products, features, imports, search ids, usage).
  await request(200, 'POST', '/api/v1/related', {
    body: { productId: 'hammer' },
    headers: { authorization: `Bearer ${spareKey.body.searchId}` },
  });
  await request(204, 'DELETE', `/admin/v1/feeds/${shop}`);
  const config = stack.config as { feedDeleteBudgetMs: number };
  const budget = config.feedDeleteBudgetMs;
  config.feedDeleteBudgetMs = 0;
  try {
    await request(202, 'DELETE', `/admin/v1/feeds/${spare}`);
  } finally {
    config.feedDeleteBudgetMs = budget;
  }
  vi.restoreAllMocks();
  stack.container.usage = usage;
  expect(await stack.container.feeds.get(spare, { fresh: true })).toBeUndefined();
}, 60_000);

afterAll(async () => {
  vi.restoreAllMocks();
  usageClient?.destroy();
  await stack?.stop();
  await new Promise((resolve) => feedServer?.close(resolve));
});

describe('every function in AWS', () => {
  it.each([...ROUTES.map((route) => route.name), WORKER])(
    '%s calls DynamoDB and S3 only within its grants',
    (fn) => {
      const made = calls.filter((call) => call.fn === fn);
      expect(
        made.some((call) => call.action.startsWith('dynamodb:')),
        `${fn} was called`,
      ).toBe(true);
      const grants = grantsOf(profileOf(fn), stack.config.assetsBucket);
      const denied = [...new Set(made.filter((call) => !allowed(call, grants)).map(show))].sort();
      const all = [...new Set(made.map(show))].sort();
      expect(denied, `${fn} made:\n${all.join('\n')}`).toEqual([]);
    },
  );

  it('made no call outside the requests and the runs they handed over', () => {
    expect(calls.filter((call) => call.fn === OUTSIDE).map(show)).toEqual([]);
  });

  it('covered S3 where the functions use it', () => {
    const s3 = (fn: string) => calls.some((call) => call.fn === fn && call.action.startsWith('s3:'));
    for (const fn of ['AdminStartImport', 'AdminDeleteFeed', 'SearchImage', WORKER])
      expect(s3(fn), fn).toBe(true);
  });
});

/** A call for the failure message: its action and resource (object keys cut to their first two parts). */
function show(call: Call): string {
  const resource = call.resource.replace(/^(arn:aws:s3:::[^/]+\/[^/]+\/[^/]+\/).+$/, '$1…');
  return `${call.action} ${resource}${call.prefix !== undefined ? ` (prefix ${call.prefix})` : ''}`;
}
