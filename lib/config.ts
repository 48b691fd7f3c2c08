import { z } from 'zod';

/**
 * The one reader of process.env. Parsed once per process with zod so a misconfigured deployment fails at
 * cold start with a readable message instead of in the middle of a request. Local mode and Lambda use the
 * same schema; local mode only supplies different values (endpoints of the embedded servers).
 */
const booleanString = z
  .enum(['true', 'false', '1', '0', ''])
  .transform((value) => value === 'true' || value === '1');
const positiveInt = z.coerce.number().int().positive();

const EnvSchema = z.object({
  STAGE: z.string().min(1).default('local'),
  AWS_REGION: z.string().min(1).default('us-east-1'),
  LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),

  FEEDS_TABLE: z.string().min(1).default('vps-feeds'),
  KEYS_TABLE: z.string().min(1).default('vps-keys'),
  USAGE_TABLE: z.string().min(1).default('vps-usage'),
  PRODUCTS_TABLE: z.string().min(1).default('vps-products'),
  IMPORTS_TABLE: z.string().min(1).default('vps-imports'),
  IDEMPOTENCY_TABLE: z.string().min(1).default('vps-idempotency'),
  /** Set in local mode to the embedded DynamoDB-protocol server; unset in AWS. */
  DYNAMODB_ENDPOINT: z.url().optional(),

  ASSETS_BUCKET: z.string().min(1).default('vps-assets'),
  /** Set in local mode to the embedded S3-protocol server; unset in AWS. */
  S3_ENDPOINT: z.url().optional(),

  VECTOR_INDEX: z.enum(['local', 'opensearch']).default('local'),
  VECTOR_INDEX_DIR: z.string().min(1).default('.data/vectors'),
  /**
   * Local index: a feed's visual words up to this many MB are held in memory; a larger feed's are read
   * from its file at each search (lib/adapters/word-file.ts).
   */
  WORD_INDEX_MEMORY_MB: z.coerce.number().min(0).default(256),
  OPENSEARCH_URL: z.url().optional(),
  OPENSEARCH_INDEX_PREFIX: z.string().min(1).default('products'),
  /** Sign OpenSearch requests with SigV4 (Amazon OpenSearch Service); off for plain HTTP clusters. */
  OPENSEARCH_SIGV4: booleanString.default(false),

  /** Directory holding the converted ONNX models and their manifests (the Lambda layer mounts /opt/models). */
  MODEL_DIR: z.string().min(1).default('layers/models/build'),
  /**
   * Apply the learned projection (layers/projection, shipped in the model layer) to every embedding.
   * It changes the vectors' model version: the next import embeds every product again (docs/vision.md).
   */
  EMBEDDING_PROJECTION: booleanString.default(true),

  /** Bearer token of the admin API in local mode. Absent in local mode: generated at start. */
  ADMIN_TOKEN: z.string().min(16).optional(),
  /**
   * How API keys are mirrored into API Gateway usage plans: none locally, apigateway in AWS (then each
   * plan's usage plan id is required; usage plan keys need no REST API id).
   */
  API_KEY_REGISTRY: z.enum(['none', 'apigateway']).default('none'),
  USAGE_PLAN_FREE_ID: z.string().optional(),
  USAGE_PLAN_PRO_ID: z.string().optional(),
  USAGE_PLAN_ENTERPRISE_ID: z.string().optional(),
  /**
   * AWS only, gateway authorizer: the API key it reports for requests without `Authorization: Bearer`
   * (search id in the body), so they are metered against the Shared usage plan instead of being refused.
   */
  GATEWAY_SHARED_KEY: z.string().min(20).optional(),

  PLAN_LIMIT_FREE: positiveInt.default(100),
  PLAN_LIMIT_PRO: positiveInt.default(1000),
  /** Enterprise feeds normally carry their own hourlyLimit; this applies when one has none. */
  PLAN_LIMIT_ENTERPRISE: positiveInt.default(10000),

  /** How long a process may reuse a search id / feed lookup; bounds how fast a revocation propagates. */
  AUTH_CACHE_TTL_SECONDS: z.coerce.number().min(0).max(300).default(5),

  MAX_BODY_BYTES: positiveInt.default(6 * 1024 * 1024),
  MAX_IMAGE_PIXELS: positiveInt.default(40_000_000),
  /** Allow feed/image URLs on private and loopback addresses (local mode only: SSRF protection off). */
  FETCH_ALLOW_PRIVATE: booleanString.default(false),

  /** Where feed imports run: in this process (local mode) or in the import worker Lambda (AWS, S3 event). */
  IMPORT_RUNNER: z.enum(['in-process', 'worker']).default('worker'),
  /**
   * The import worker's own queue (AWS): a failed run is retried after a back-off and a deferred one sent
   * again (functions/import-worker.ts). Unset, both wait for the queue's visibility timeout.
   */
  IMPORT_QUEUE_URL: z.url().optional(),
  IMPORT_CHUNK_SIZE: positiveInt.max(500).default(32),
  IMAGE_FETCH_CONCURRENCY: positiveInt.max(64).default(8),
  IMAGE_FETCH_TIMEOUT_MS: positiveInt.default(10_000),
  IMAGE_MAX_BYTES: positiveInt.default(15 * 1024 * 1024),
  FEED_FETCH_TIMEOUT_MS: positiveInt.default(120_000),
  FEED_MAX_BYTES: positiveInt.default(512 * 1024 * 1024),
  /**
   * How long a feed's DELETE request deletes before it hands the rest to the import runner and answers
   * 202 (inside API Gateway's 29 s; 0 hands every deletion over).
   */
  FEED_DELETE_BUDGET_MS: z.coerce.number().int().min(0).max(25_000).default(20_000),
  /**
   * Image search: how many of the best item groups by global similarity are geometrically verified and
   * re-ranked (local features); 0 turns re-ranking off (global order, global-only scores). 10: with the
   * keypoint shortlist, 10 and 20 gave the same recall on both measurements of docs/quality.md, and
   * 10 verifies less.
   */
  RERANK_TOP_N: z.coerce.number().int().min(0).max(100).default(10),
  /**
   * Image search: how many of the best item groups by shared visual words (the keypoint shortlist) are
   * verified along with the RERANK_TOP_N global ones; 0 turns the keypoint shortlist off. Needs
   * RERANK_TOP_N > 0. The local index keeps the words in memory (docs/benchmarks.md). 10: each verified
   * candidate costs ~1.3 ms at 10k products, and 20 gained 0.4 points of R@1 for 14 ms more at p50
   * (over the 80 ms budget); docs/quality.md.
   */
  WORD_SHORTLIST_TOP_N: z.coerce.number().int().min(0).max(100).default(10),
  /**
   * Image queries drop results whose calibrated score is below this (docs/api.md); 0 keeps every result.
   * 0.4: on the benchmark in docs/quality.md the default keeps 372 of 379 correct top-1 results and
   * none of the 30 unrelated photos returns anything.
   */
  MIN_SCORE: z.coerce.number().min(0).max(1).default(0.4),
  /**
   * Image search also embeds the detector's most confident box and ranks by the better of whole image and
   * crop. Off by default: on the demo catalogue with the projection the same R@1, ~50 ms more per query
   * (docs/quality.md).
   */
  QUERY_DETECTOR_CROP: booleanString.default(false),
  /**
   * Image search also compares the query's regions (3/5/7-cell windows of a 448-px backbone pass,
   * lib/vision/regional.ts) with the shortlisted products: their best window is their global evidence
   * when it beats the whole image. Needs EMBEDDING_PROJECTION (ignored without it). docs/quality.md.
   */
  REGIONAL_MATCHING: booleanString.default(true),
  /**
   * With REGIONAL_MATCHING: how many of the best item groups by region k-NN join the verified shortlist.
   * Verified only by searches not confident after the first verification. 30 rather than 10: benchmark
   * R@1 0.850 -> 0.855, R@10 0.900 -> 0.910. In local mode a worker takes half of the verification, and
   * the warm p50 measured 65.9–76.4 ms against 63.4–69.2 with 10 on one thread; in AWS, 20 more feature
   * reads and verifications on the function's thread (not measured; docs/deploy.md).
   */
  REGIONAL_TOP_N: z.coerce.number().int().min(0).max(100).default(30),
  /**
   * Image search's second look: when nothing verified, this many of the detector's boxes are extracted
   * again at their own size and verified against their own keypoint shortlist (lib/domain/search.ts,
   * docs/quality.md). 0: off.
   */
  SECOND_LOOK_BOXES: z.coerce.number().int().min(0).max(5).default(0),
  /** Lowest detector score of a box the second look considers. */
  SECOND_LOOK_MIN_SCORE: z.coerce.number().min(0).max(1).default(0.05),
  /**
   * Groups of each box's keypoint shortlist that the second look verifies. 50 rather than the photo's 10:
   * benchmark R@1 0.876 -> 0.889, R@10 0.925 -> 0.934 with one box; bench:search p50 +0-15 ms for the
   * photos that look again (docs/quality.md "Deeper box shortlists"). In AWS up to this many feature
   * reads (S3 GETs when uncached) and verifications on the function's thread per box: not measured.
   */
  SECOND_LOOK_WORD_TOP_N: z.coerce.number().int().min(1).max(200).default(50),
  /**
   * Worker threads for ORB extraction (lib/vision/local-features/extract-pool.ts); 0: on the JS thread.
   * Needs the TypeScript sources (local mode sets 1); the Lambda bundles keep 0.
   */
  LOCAL_FEATURE_WORKERS: z.coerce.number().int().min(0).max(8).default(0),
  /**
   * With LOCAL_FEATURE_WORKERS: a plain-JS bundle of the worker's entry to run instead of the TypeScript
   * one through tsx's loader (local mode builds one at start: lib/local/worker-bundle.ts).
   */
  LOCAL_FEATURE_WORKER_ENTRY: z.string().min(1).optional(),
  /** Decoded catalogue features kept in memory per process (≈ 50–58 KB each with keypoint recipe 2). */
  FEATURE_CACHE_ITEMS: z.coerce.number().int().min(0).default(2000),
  /**
   * ...and at most this many MB of them, whatever their count: a real catalogue image's record is ~52 KB
   * decoded, so the 2,000 items alone took ~108 MB of arrays (+172 MB of RSS) at 100k products, past
   * DESIGN §6's 800 MB (docs/benchmarks.md "The rest of the memory at 100k").
   */
  FEATURE_CACHE_MB: z.coerce.number().min(0).default(48),
  /** Local mode only: import the committed demo catalogue into the demo feed at start. */
  DEMO_SEED: booleanString.default(true),

  /** Local mode only: HTTP port and the folder where the embedded stores persist. */
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  DATA_DIR: z.string().min(1).default('.data'),
});

export type Plan = 'free' | 'pro' | 'enterprise';

export interface Config {
  stage: string;
  region: string;
  logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  tables: {
    feeds: string;
    keys: string;
    usage: string;
    products: string;
    imports: string;
    idempotency: string;
  };
  dynamodbEndpoint: string | undefined;
  assetsBucket: string;
  s3Endpoint: string | undefined;
  vectorIndex:
    | { kind: 'local'; dir: string; wordMemoryBytes: number }
    | { kind: 'opensearch'; url: string; indexPrefix: string; sigv4: boolean };
  modelDir: string;
  embeddingProjection: boolean;
  adminToken: string | undefined;
  apiKeyRegistry: { kind: 'none' } | { kind: 'apigateway'; usagePlanIds: Record<Plan, string> };
  gatewaySharedKey: string | undefined;
  planLimits: Record<Plan, number>;
  authCacheTtlMs: number;
  maxBodyBytes: number;
  maxImagePixels: number;
  fetchAllowPrivate: boolean;
  feedDeleteBudgetMs: number;
  imports: {
    runner: 'in-process' | 'worker';
    /** The import worker's queue (IMPORT_QUEUE_URL), for retries and deferrals; unset locally. */
    queueUrl: string | undefined;
    chunkSize: number;
    imageConcurrency: number;
    image: { timeoutMs: number; maxBytes: number };
    feed: { timeoutMs: number; maxBytes: number };
  };
  search: {
    rerankTopN: number;
    wordShortlistTopN: number;
    minScore: number;
    featureCacheItems: number;
    featureCacheBytes: number;
    /** ORB extraction threads (0: the JS thread). */
    localFeatureWorkers: number;
    /** A bundled worker entry (file path), when there is one. */
    localFeatureWorkerEntry: string | undefined;
    detectorCrop: boolean;
    regionalMatching: boolean;
    regionalTopN: number;
    secondLook: { boxes: number; minScore: number; wordTopN: number };
  };
  demoSeed: boolean;
  local: { port: number; dataDir: string };
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Parses configuration from an environment map (process.env by default). Throws ConfigError. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = EnvSchema.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    throw new ConfigError(`Invalid configuration: ${problems.join('; ')}`);
  }
  const e = parsed.data;
  let vectorIndex: Config['vectorIndex'];
  if (e.VECTOR_INDEX === 'opensearch') {
    if (!e.OPENSEARCH_URL) throw new ConfigError('Invalid configuration: OPENSEARCH_URL is required');
    vectorIndex = {
      kind: 'opensearch',
      url: e.OPENSEARCH_URL,
      indexPrefix: e.OPENSEARCH_INDEX_PREFIX,
      sigv4: e.OPENSEARCH_SIGV4,
    };
  } else {
    vectorIndex = {
      kind: 'local',
      dir: e.VECTOR_INDEX_DIR,
      wordMemoryBytes: e.WORD_INDEX_MEMORY_MB * 2 ** 20,
    };
  }
  let apiKeyRegistry: Config['apiKeyRegistry'] = { kind: 'none' };
  if (e.API_KEY_REGISTRY === 'apigateway') {
    if (!e.USAGE_PLAN_FREE_ID || !e.USAGE_PLAN_PRO_ID || !e.USAGE_PLAN_ENTERPRISE_ID) {
      throw new ConfigError(
        'Invalid configuration: USAGE_PLAN_FREE_ID, USAGE_PLAN_PRO_ID and USAGE_PLAN_ENTERPRISE_ID are required with API_KEY_REGISTRY=apigateway',
      );
    }
    apiKeyRegistry = {
      kind: 'apigateway',
      usagePlanIds: {
        free: e.USAGE_PLAN_FREE_ID,
        pro: e.USAGE_PLAN_PRO_ID,
        enterprise: e.USAGE_PLAN_ENTERPRISE_ID,
      },
    };
  }
  return {
    stage: e.STAGE,
    region: e.AWS_REGION,
    logLevel: e.LOG_LEVEL,
    tables: {
      feeds: e.FEEDS_TABLE,
      keys: e.KEYS_TABLE,
      usage: e.USAGE_TABLE,
      products: e.PRODUCTS_TABLE,
      imports: e.IMPORTS_TABLE,
      idempotency: e.IDEMPOTENCY_TABLE,
    },
    dynamodbEndpoint: e.DYNAMODB_ENDPOINT,
    assetsBucket: e.ASSETS_BUCKET,
    s3Endpoint: e.S3_ENDPOINT,
    vectorIndex,
    modelDir: e.MODEL_DIR,
    embeddingProjection: e.EMBEDDING_PROJECTION,
    adminToken: e.ADMIN_TOKEN,
    apiKeyRegistry,
    gatewaySharedKey: e.GATEWAY_SHARED_KEY,
    planLimits: { free: e.PLAN_LIMIT_FREE, pro: e.PLAN_LIMIT_PRO, enterprise: e.PLAN_LIMIT_ENTERPRISE },
    authCacheTtlMs: e.AUTH_CACHE_TTL_SECONDS * 1000,
    maxBodyBytes: e.MAX_BODY_BYTES,
    maxImagePixels: e.MAX_IMAGE_PIXELS,
    fetchAllowPrivate: e.FETCH_ALLOW_PRIVATE,
    feedDeleteBudgetMs: e.FEED_DELETE_BUDGET_MS,
    imports: {
      runner: e.IMPORT_RUNNER,
      queueUrl: e.IMPORT_QUEUE_URL,
      chunkSize: e.IMPORT_CHUNK_SIZE,
      imageConcurrency: e.IMAGE_FETCH_CONCURRENCY,
      image: { timeoutMs: e.IMAGE_FETCH_TIMEOUT_MS, maxBytes: e.IMAGE_MAX_BYTES },
      feed: { timeoutMs: e.FEED_FETCH_TIMEOUT_MS, maxBytes: e.FEED_MAX_BYTES },
    },
    search: {
      rerankTopN: e.RERANK_TOP_N,
      wordShortlistTopN: e.WORD_SHORTLIST_TOP_N,
      minScore: e.MIN_SCORE,
      featureCacheItems: e.FEATURE_CACHE_ITEMS,
      featureCacheBytes: Math.round(e.FEATURE_CACHE_MB * 2 ** 20),
      localFeatureWorkers: e.LOCAL_FEATURE_WORKERS,
      localFeatureWorkerEntry: e.LOCAL_FEATURE_WORKER_ENTRY,
      detectorCrop: e.QUERY_DETECTOR_CROP,
      regionalMatching: e.REGIONAL_MATCHING && e.EMBEDDING_PROJECTION,
      regionalTopN: e.REGIONAL_TOP_N,
      secondLook: {
        boxes: e.SECOND_LOOK_BOXES,
        minScore: e.SECOND_LOOK_MIN_SCORE,
        wordTopN: e.SECOND_LOOK_WORD_TOP_N,
      },
    },
    demoSeed: e.DEMO_SEED,
    local: { port: e.PORT, dataDir: e.DATA_DIR },
  };
}

/** Names of every environment key loadConfig reads (the CDK stack sets these on each function). */
export const CONFIG_ENV_KEYS = Object.keys(EnvSchema.shape) as (keyof typeof EnvSchema.shape)[];

/**
 * Checks one key's value with the same field parser loadConfig uses (no cross-key checks), so a value
 * decided before a process starts (a stage's tuning at `cdk synth`) fails early with the message a cold
 * start would give. Throws ConfigError naming the key; returns the parsed value.
 */
export function parseConfigValue(key: (typeof CONFIG_ENV_KEYS)[number], value: string): unknown {
  const field: z.ZodType | undefined = (EnvSchema.shape as Record<string, z.ZodType>)[key];
  if (!field) throw new ConfigError(`Invalid configuration: ${key} is not a configuration key`);
  const parsed = field.safeParse(value);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => issue.message);
    throw new ConfigError(`Invalid configuration: ${key}=${JSON.stringify(value)}: ${problems.join('; ')}`);
  }
  return parsed.data;
}
