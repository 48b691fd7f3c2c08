import { join } from 'node:path';
import { CachingFeedStore, CachingKeyStore } from '#lib/adapters/caching-stores.ts';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { DynamoDbFeedStore } from '#lib/adapters/dynamodb-feed-store.ts';
import { DynamoDbKeyStore } from '#lib/adapters/dynamodb-key-store.ts';
import { DynamoDbProductStore } from '#lib/adapters/dynamodb-product-store.ts';
import { DynamoDbUsageStore } from '#lib/adapters/dynamodb-usage-store.ts';
import { NoopApiKeyRegistry } from '#lib/adapters/noop-api-key-registry.ts';
import { S3FeedFileStore } from '#lib/adapters/s3-feed-file-store.ts';
import { createS3Client, S3ObjectStore } from '#lib/adapters/s3-object-store.ts';
import { SharpImageInspector } from '#lib/adapters/sharp-image-inspector.ts';
import { ObjectStoreFeatureStore } from '#lib/adapters/object-store-feature-store.ts';
import { DynamoDbIdempotencyStore } from '#lib/adapters/dynamodb-idempotency-store.ts';
import { DynamoDbImportStore } from '#lib/adapters/dynamodb-import-store.ts';
import { HttpImageFetcher } from '#lib/adapters/http-image-fetcher.ts';
import { UsearchVectorIndex } from '#lib/adapters/usearch-vector-index.ts';
import { LocalVisualWordIndex } from '#lib/adapters/local-visual-word-index.ts';
import { PROJECTED_COSINE_SCALE } from '#lib/vision/projection.ts';
import { LazyApiKeyRegistry, LazyVisualWordIndex } from '#lib/adapters/lazy-adapters.ts';
import { InProcessImportDispatcher, ObjectEventImportDispatcher } from '#lib/ingest/dispatchers.ts';
import type { IngestDeps } from '#lib/ingest/run-import.ts';
import { runFeedJob } from '#lib/ingest/feed-jobs.ts';
import type { FeedAdminDeps } from '#lib/domain/admin/feeds.ts';
import { systemClock } from '#lib/adapters/system-clock.ts';
import { type Config, loadConfig } from '#lib/config.ts';
import { UnavailableError } from '#lib/domain/errors.ts';
import type { Reranking } from '#lib/domain/search.ts';
import type { OrbLocalFeatureMatcher } from '#lib/adapters/orb-local-feature-matcher.ts';
import { createLogger, type Logger } from '#lib/log.ts';
import { memoised } from '#lib/memoised.ts';
import type {
  ApiKeyRegistry,
  Clock,
  FeatureStore,
  FeedFileStore,
  FeedStore,
  IdempotencyStore,
  ImageFetcher,
  ImageInspector,
  ImportDispatcher,
  ImportStore,
  KeyStore,
  LocalFeatureMatcher,
  ObjectStore,
  UsageStore,
  VectorIndex,
  VisualWordIndex,
  Vision,
} from '#lib/ports.ts';

/** Every adapter the handlers use, built once per process from configuration. */
export interface Container {
  config: Config;
  logger: Logger;
  clock: Clock;
  feeds: FeedStore;
  keys: KeyStore;
  usage: UsageStore;
  products: DynamoDbProductStore;
  objects: ObjectStore;
  /** Local features of the catalogue's images (written by imports, read by geometric verification). */
  features: FeatureStore;
  images: ImageInspector;
  apiKeys: ApiKeyRegistry;
  /** The ONNX model layer, loaded on first use; rejects with UnavailableError when it cannot load. */
  vision(): Promise<Vision>;
  imports: ImportStore;
  /** Answers of admin creates sent with an Idempotency-Key (lib/http/idempotency.ts). */
  idempotency: IdempotencyStore;
  feedFiles: FeedFileStore;
  fetcher: ImageFetcher;
  /** Runs queued imports: in this process (local) or nothing here, the S3 event starts the worker (AWS). */
  dispatcher: ImportDispatcher;
  /** What runImport needs, with the configured limits. */
  ingest: IngestDeps;
  /** The vector index of the loaded embedding model (one index per model version), opened on first use. */
  vectors(): Promise<VectorIndex>;
  /**
   * A feed's vectors of every model version, for the feed deletion, without loading a model in AWS
   * (the admin functions have no model layer); locally the live index of the loaded model, which holds
   * its vectors in memory.
   */
  feedVectors(): Promise<Pick<VectorIndex, 'deleteFeed' | 'flush'>>;
  /** Visual words of the catalogue's images (the keypoint shortlist, WORD_SHORTLIST_TOP_N). */
  visualWords: VisualWordIndex;
  /** Geometric re-ranking of image searches (RERANK_TOP_N; undefined when it is 0). */
  reranking: Reranking | undefined;
  /** Minimum score of image-query results (MIN_SCORE). */
  minScore: number;
  /** Image search also ranks by the detector's top box (QUERY_DETECTOR_CROP). */
  detectorCrop: boolean;
  /** Regional matching of image searches (REGIONAL_MATCHING, REGIONAL_TOP_N); undefined when off. */
  regional: { topN: number } | undefined;
  /** Image search's second look at detected boxes (SECOND_LOOK_BOXES); undefined when off. */
  secondLook: { boxes: number; minScore: number; wordTopN: number } | undefined;
  /** Cosine scale of the calibrated score for the configured embedding (projected or raw). */
  cosineScale?: { cosineFloor: number; cosineCeiling: number };
  /** Stops what this process started for the container: the extraction workers, if any. */
  close(): Promise<void>;
}

let configured: Config | undefined;
let instance: Container | undefined;

/** Local mode (and tests) choose the configuration before the first request; Lambda reads process.env. */
export function configureContainer(config: Config): void {
  configured = config;
  instance = undefined;
}

export function getContainer(): Container {
  instance ??= buildContainer(configured ?? loadConfig());
  return instance;
}

/** The container as the feed administration's use cases take it (the admin API, the import runner). */
export function feedAdminDeps(c: Container): FeedAdminDeps {
  return { ...c, planLimits: c.config.planLimits, deletionBudgetMs: c.config.feedDeleteBudgetMs };
}

function buildContainer(config: Config): Container {
  const db = createDocumentClient(config);
  const logger = createLogger(config.logLevel, { stage: config.stage });
  let matcher: Promise<OrbLocalFeatureMatcher> | undefined;
  const s3 = createS3Client(config);
  const objects = new S3ObjectStore(s3, config.assetsBucket);
  const features = new ObjectStoreFeatureStore(objects, {
    cacheItems: config.search.featureCacheItems,
    cacheBytes: config.search.featureCacheBytes,
  });
  const visualWords = openVisualWordIndex(config);
  const localFeatures = {
    store: features,
    words: visualWords,
    matcher(): Promise<LocalFeatureMatcher> {
      // Imported on first use: handlers that never search or import never load the OpenCV module (local
      // mode asks for it at start, so that its extraction worker loads OpenCV before the first request).
      matcher ??= import('#lib/adapters/orb-local-feature-matcher.ts')
        .then(
          ({ OrbLocalFeatureMatcher }) =>
            new OrbLocalFeatureMatcher({
              workers: config.search.localFeatureWorkers,
              workerEntry: config.search.localFeatureWorkerEntry,
            }),
        )
        .catch((error: unknown) => {
          matcher = undefined;
          throw error;
        });
      return matcher;
    },
  };
  const container: Container = {
    config,
    logger,
    clock: systemClock,
    feeds: new CachingFeedStore(new DynamoDbFeedStore(db, config.tables.feeds), config.authCacheTtlMs),
    keys: new CachingKeyStore(new DynamoDbKeyStore(db, config.tables.keys), config.authCacheTtlMs),
    usage: new DynamoDbUsageStore(db, config.tables.usage),
    products: new DynamoDbProductStore(db, config.tables.products),
    objects,
    features,
    images: new SharpImageInspector(config.maxImagePixels),
    apiKeys: buildApiKeyRegistry(config),
    // Memoised while it succeeds; a failed load is retried by the next request.
    vision: memoised(() => loadVisionLayer(config, logger)),
    imports: new DynamoDbImportStore(db, config.tables.imports),
    idempotency: new DynamoDbIdempotencyStore(db, config.tables.idempotency),
    feedFiles: new S3FeedFileStore(s3, config.assetsBucket),
    fetcher: new HttpImageFetcher({ allowPrivate: config.fetchAllowPrivate }),
    dispatcher:
      config.imports.runner === 'in-process'
        ? new InProcessImportDispatcher(
            (feedId, jobId, signal) =>
              runFeedJob(
                { ingest: container.ingest, admin: feedAdminDeps(container), logger },
                feedId,
                jobId,
                signal,
              ),
            logger,
          )
        : new ObjectEventImportDispatcher(),
    get ingest(): IngestDeps {
      return {
        feeds: container.feeds,
        products: container.products,
        imports: container.imports,
        feedFiles: container.feedFiles,
        objects: container.objects,
        fetcher: container.fetcher,
        images: container.images,
        clock: container.clock,
        vision: container.vision,
        vectors: container.vectors,
        localFeatures,
        limits: {
          image: config.imports.image,
          feed: config.imports.feed,
          imageConcurrency: config.imports.imageConcurrency,
          chunkSize: config.imports.chunkSize,
        },
        onProgress: (record) =>
          logger.debug('import progress', {
            feedId: record.feedId,
            importId: record.importId,
            processed: record.processed,
          }),
      };
    },
    vectors: memoised(() => openVectorIndex(config, container)),
    feedVectors: memoised(() => openFeedVectors(config, container)),
    visualWords,
    reranking:
      config.search.rerankTopN > 0
        ? {
            matcher: localFeatures.matcher,
            features,
            topN: config.search.rerankTopN,
            words: visualWords,
            wordTopN: config.search.wordShortlistTopN,
          }
        : undefined,
    minScore: config.search.minScore,
    ...(config.embeddingProjection ? { cosineScale: PROJECTED_COSINE_SCALE } : {}),
    detectorCrop: config.search.detectorCrop,
    regional: config.search.regionalMatching ? { topN: config.search.regionalTopN } : undefined,
    secondLook: config.search.secondLook.boxes > 0 ? config.search.secondLook : undefined,
    async close() {
      const started = matcher;
      matcher = undefined;
      await (await started?.catch(() => undefined))?.close();
      await visualWords.close?.();
    },
  };
  return container;
}

async function openFeedVectors(
  config: Config,
  container: Pick<Container, 'vectors' | 'vision'>,
): Promise<Pick<VectorIndex, 'deleteFeed' | 'flush'>> {
  const index = config.vectorIndex;
  if (index.kind !== 'opensearch') return localFeedVectors(index.dir, container);
  const { createOpenSearchClient, OpenSearchFeedVectors } =
    await import('#lib/adapters/opensearch-vector-index.ts');
  return new OpenSearchFeedVectors(
    createOpenSearchClient({ url: index.url, sigv4: index.sigv4, region: config.region }),
    index.indexPrefix,
  );
}

/**
 * Local files: through the loaded model's index, which holds its feeds in memory, and from the other
 * model versions' folders on disk; when the models cannot load (no index can open without their
 * dimension), from every version's folder. A feed's deletion answered 503 there before.
 */
function localFeedVectors(
  root: string,
  container: Pick<Container, 'vectors' | 'vision'>,
): Pick<VectorIndex, 'deleteFeed' | 'flush'> {
  const live = async () => {
    try {
      return { index: await container.vectors(), version: (await container.vision()).embedder.modelVersion };
    } catch (error) {
      if (error instanceof UnavailableError) return undefined;
      throw error;
    }
  };
  return {
    async deleteFeed(feedId, options) {
      const open = await live();
      await open?.index.deleteFeed(feedId, options);
      // (The visual words' folder sits beside the versions' folders: its files are not these.)
      await UsearchVectorIndex.deleteFeedFiles(root, feedId, [
        VISUAL_WORDS_FOLDER,
        ...(open ? [open.version] : []),
      ]);
    },
    async flush() {
      await (await live())?.index.flush();
    },
  };
}

/** The index of the loaded model's version: local usearch files per version, or one OpenSearch index per version. */
async function openVectorIndex(config: Config, container: Pick<Container, 'vision'>): Promise<VectorIndex> {
  const { embedder } = await container.vision();
  const index = config.vectorIndex;
  if (index.kind === 'opensearch') {
    // Imported here: local mode never loads the OpenSearch client (~0.3 s, docs/benchmarks.md "Cold start").
    const { createOpenSearchClient, OpenSearchVectorIndex } =
      await import('#lib/adapters/opensearch-vector-index.ts');
    return new OpenSearchVectorIndex({
      client: createOpenSearchClient({ url: index.url, sigv4: index.sigv4, region: config.region }),
      indexPrefix: index.indexPrefix,
      modelVersion: embedder.modelVersion,
      dimension: embedder.dimension,
    });
  }
  return UsearchVectorIndex.open({
    dir: join(index.dir, embedder.modelVersion),
    dimension: embedder.dimension,
  });
}

/**
 * The visual-word index next to the vector index: local files beside the local vectors, or one OpenSearch
 * index (`${indexPrefix}-visual-words-v1`) beside the k-NN indices. Words come from the ORB descriptors,
 * not the embedder, so they do not depend on the model version. Kept up to date (written and deleted with
 * the features) even while WORD_SHORTLIST_TOP_N or RERANK_TOP_N switch the shortlist off: turning it on
 * again then finds a current index, not orphans of deleted products.
 */
function openVisualWordIndex(config: Config): VisualWordIndex {
  const index = config.vectorIndex;
  if (index.kind === 'local')
    return new LocalVisualWordIndex(join(index.dir, VISUAL_WORDS_FOLDER), {
      memoryBytes: index.wordMemoryBytes,
    });
  // One index for every feed next to the vector indices (same cluster, prefix and IAM grants).
  return new LazyVisualWordIndex(async () => {
    const [{ createOpenSearchClient }, { OpenSearchVisualWordIndex }] = await Promise.all([
      import('#lib/adapters/opensearch-vector-index.ts'),
      import('#lib/adapters/opensearch-visual-word-index.ts'),
    ]);
    return new OpenSearchVisualWordIndex({
      client: createOpenSearchClient({ url: index.url, sigv4: index.sigv4, region: config.region }),
      indexPrefix: index.indexPrefix,
    });
  });
}

/** Bumped with the word definition (lib/vision/local-features/visual-words.ts) or the file format. */
const VISUAL_WORDS_FOLDER = 'visual-words-v2';

/** AWS mirrors search ids into the gateway's usage plans; local mode has no gateway. */
function buildApiKeyRegistry(config: Config): ApiKeyRegistry {
  const registry = config.apiKeyRegistry;
  if (registry.kind === 'none') return new NoopApiKeyRegistry();
  return new LazyApiKeyRegistry(async () => {
    const [{ APIGatewayClient }, { ApiGatewayApiKeyRegistry }] = await Promise.all([
      import('@aws-sdk/client-api-gateway'),
      import('#lib/adapters/apigateway-api-key-registry.ts'),
    ]);
    return new ApiGatewayApiKeyRegistry(
      new APIGatewayClient({ region: config.region }),
      registry.usagePlanIds,
    );
  });
}

async function loadVisionLayer(config: Config, logger: Logger): Promise<Vision> {
  const started = Date.now();
  try {
    // Imported on first use so that handlers that never need the models never load onnxruntime.
    const { loadVision } = await import('#lib/vision/load-vision.ts');
    const vision = await loadVision(
      config.modelDir,
      {},
      { projection: config.embeddingProjection, regional: config.search.regionalMatching },
    );
    logger.info('vision loaded', { ms: Date.now() - started });
    return vision;
  } catch (error) {
    logger.error('vision unavailable', { error: error instanceof Error ? error.message : String(error) });
    throw new UnavailableError('The image models are not available. Retry later.');
  }
}
