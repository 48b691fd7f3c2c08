import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import {
  headText,
  readFeed,
  sniffFormat,
  type FeedFormat,
  type RawRecord,
} from '#lib/domain/catalogue/feed-formats.ts';
import {
  FEED_LEASE_MS,
  FetchError,
  importObjectKeys,
  MAX_IMPORT_ERRORS,
  type ImportRecord,
  type ImportRowError,
  type RecordedImportProblem,
  severityOf,
} from '#lib/domain/catalogue/imports.ts';
import { feedStillLive } from '#lib/domain/admin/feeds.ts';
import {
  errorProductId,
  isImportNote,
  normaliseRecord,
  RowError,
  wellFormed,
} from '#lib/domain/catalogue/normalise.ts';
import { DomainError, InvalidImageError, NotFoundError } from '#lib/domain/errors.ts';
import {
  contentHash,
  filterFieldsOf,
  groupOf,
  imagesOf,
  type Product,
  type ProductContent,
  vectorDocumentId,
} from '#lib/domain/products.ts';
import { mapLimit } from '#lib/ingest/concurrency.ts';
import { redactUrl, redactUrls } from '#lib/log.ts';
import { CATALOGUE_FEATURES_VERSION } from '#lib/vision/local-features/recipe.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';
import type {
  Clock,
  Embedder,
  FeatureStore,
  FeedStore,
  FetchLimits,
  FeedFileStore,
  ImageFetcher,
  ImageInspector,
  ImportStore,
  LocalFeatureMatcher,
  ObjectStore,
  ProductStore,
  VectorDocument,
  VectorIndex,
  Vision,
  VisualWordDocument,
  VisualWordIndex,
} from '#lib/ports.ts';
import { VISUAL_WORDS_VERSION, visualWords } from '#lib/vision/local-features/visual-words.ts';

export interface IngestLimits {
  image: FetchLimits;
  feed: FetchLimits;
  /** Images fetched at once. */
  imageConcurrency: number;
  /** Rows handled per step (one store round trip, one embedding batch, one checkpoint). */
  chunkSize: number;
  /** How long a chunk that wrote nothing may leave its progress unsaved (Save); QUIET_SAVE_MS if absent. */
  quietSaveMs?: number;
}

export interface IngestDeps {
  /** Read fresh before the import starts and after each of its writes: a deleted feed stops it. */
  feeds: Pick<FeedStore, 'get'>;
  products: ProductStore;
  imports: ImportStore;
  feedFiles: FeedFileStore;
  /** Removes the import's own feed file and request marker when its feed was deleted under it. */
  objects: Pick<ObjectStore, 'delete'>;
  fetcher: ImageFetcher;
  images: ImageInspector;
  clock: Clock;
  vision(): Promise<Vision>;
  vectors(): Promise<VectorIndex>;
  /**
   * Local features for geometric re-ranking: extracted from every embedded image and stored under its
   * vector document's address. Absent: none are stored (search then cannot verify this feed's items).
   */
  localFeatures?: {
    store: FeatureStore;
    matcher(): Promise<LocalFeatureMatcher>;
    /** The features' visual words are indexed here too (the keypoint shortlist of search); absent: not. */
    words?: VisualWordIndex;
  };
  limits: IngestLimits;
  /**
   * Called as each import's run begins, its record marked running (its `attempts` counting this run),
   * for every import the runner takes on, not only the one a trigger named (logging); never throws into
   * the import.
   */
  onStart?(record: ImportRecord): void;
  /**
   * Called once as a run ends an import, succeeded or failed, with how long that run took (logging, the
   * failed-imports metric): not for a run that pauses or is retried, nor for an import already ended (a
   * repeated trigger) or dropped with its feed. Never throws into the import.
   */
  onFinish?(record: ImportRecord, ms: number): void;
  /** Progress callback (logging); never throws into the import. */
  onProgress?(record: ImportRecord): void;
  /** Aborting pauses the import at its next checkpoint (it stays running and resumes later). */
  signal?: AbortSignal;
}

interface Valid {
  row: number;
  content: ProductContent;
  /** What normaliseRecord left out of the product (noted once it is known not to be a duplicate). */
  notes: string[];
}

/**
 * Runs (or resumes) one feed import. Steps:
 * 1. load the import; finished imports are left alone (a repeated trigger is harmless); mark it running;
 * 2. make sure the feed file is stored (URL imports stream it in, SSRF-checked and size-capped) and know
 *    its format; the file is only ever streamed, never held in memory whole;
 * 3. count the rows (a streaming pass) so progress has a total;
 * 4. stream the rows after the checkpoint in chunks: normalise (bad rows → errors), skip products whose
 *    update_hash and embedding model are unchanged, fetch and embed the images of the others (bounded
 *    concurrency, timeouts, size caps; unreachable images → errors) while extracting their local features
 *    (a failed extraction stores nothing and fails nothing), mark the stored records of those whose
 *    vectors will change as stale (update_hash cleared, the one before kept as stale_hash; the model too
 *    when their images or model change: a chunk stopped half way is then redone by any later import as an
 *    uninterrupted one does it, a change of content told by stale_hash, vectors of unchanged images
 *    re-filed or kept, any it embedded past those kept removed), replace their vectors, stored features
 *    and words in place, save the vector and word indices, then write the products (marked as seen by
 *    this import), then checkpoint the progress; products whose images did not change keep their vectors
 *    and features (products stored before local features existed are embedded once more to get them);
 * 5. a full import removes the feed's products this import did not see (store, vector index, features),
 *    counting them in `removed` batch by batch, unless the file could not be read to its end, has a row
 *    that could not be read at all, or not one of its products was imported (embedded, re-filed, skipped
 *    as unchanged, or kept its vectors when its keypoint refresh failed: a file whose every image failed
 *    otherwise removes nothing);
 * 6. flush the indices and mark the import succeeded, or failed with the reason when the feed itself is
 *    unusable (unreachable URL, models unavailable) or its file listed valid products of which not one
 *    could be imported (their count and the first image error); other errors propagate and leave the
 *    checkpoint for a retry to resume from, until the rows after it have failed `MAX_IMPORT_ATTEMPTS` runs
 *    in a row: then the import fails with that error.
 * Each progress save is followed by a fresh read of the feed (and the feed is read every FEED_CHECK_MS
 * while a chunk is prepared): once a deletion of the feed has started (or the feed was replaced by a new
 * one of the same id), the import stops and removes what it wrote since the previous save, which the
 * deletion may have missed, and its own record and files (`abandon`). What it wrote before that save
 * preceded the deletion's mark, so the deletion removes it.
 */
export async function runImport(
  deps: IngestDeps,
  feedId: string,
  importId: string,
  /** Called at every progress save by a runner holding the feed's lease (runTriggeredImport). */
  renewLease?: () => Promise<void>,
): Promise<ImportRecord> {
  const loaded = await deps.imports.get(feedId, importId);
  if (!loaded) throw new NotFoundError('import_not_found', `Import ${importId} not found.`);
  if (loaded.status === 'succeeded' || loaded.status === 'failed') return loaded;
  let record: ImportRecord = {
    ...loaded,
    status: 'running',
    startedAt: loaded.startedAt ?? now(deps),
    attempts: (loaded.attempts ?? 0) + 1,
  };
  const feed = await deps.feeds.get(feedId, { fresh: true });
  // An import started for an earlier feed of the same id, deleted since, does not run into this one
  // (imports recorded before feedCreatedAt existed: one created before the feed cannot be for it).
  const otherFeed =
    loaded.feedCreatedAt !== undefined
      ? loaded.feedCreatedAt !== feed?.createdAt
      : feed !== undefined && loaded.createdAt < feed.createdAt;
  if (!feed || feed.deletingAt || otherFeed) return abandon(deps, record, new Set());
  const startedAt = Date.now();
  notify(() => deps.onStart?.(record));
  // Products this import wrote since its last save (whose feed check then passed).
  const unconfirmed = new Set<string>();
  let savedAt = performance.now();
  // The runs the rows after the stored checkpoint have failed, this one included: the in-memory record's
  // count says 1 once a refused chunk has moved its checkpoint, though that progress is not stored yet.
  let savedAttempts = record.attempts ?? 1;
  const save: Save = async (patch, { wroteNothing = false } = {}) => {
    // Progress that wrote nothing waits for the next save (a crash redoes those rows, refused again).
    if (wroteNothing && performance.now() - savedAt < (deps.limits.quietSaveMs ?? QUIET_SAVE_MS)) {
      record = { ...record, ...patch };
      return;
    }
    savedAt = performance.now();
    await renewLease?.();
    record = { ...record, ...patch, updatedAt: now(deps) };
    await deps.imports.put(record);
    savedAttempts = record.attempts ?? 1;
    if (!(await feedStillLive(deps.feeds, feed))) throw new FeedGone();
    unconfirmed.clear();
    notify(() => deps.onProgress?.(record));
  };
  try {
    const ended = await importInto(
      deps,
      () => record,
      () => savedAttempts,
      save,
      unconfirmed,
      () => feedStillLive(deps.feeds, feed),
      async () => renewLease?.(),
    );
    // (Ended: importInto returns only a succeeded or failed import; a pause or an error throws.)
    notify(() => deps.onFinish?.(ended, Date.now() - startedAt));
    return ended;
  } catch (error) {
    // A runner that lost its lease stalled (another took over): what it wrote since its last save must
    // not outlive a deletion of the feed meanwhile either.
    const gone =
      error instanceof FeedGone || (error instanceof LeaseLost && !(await feedStillLive(deps.feeds, feed)));
    if (gone) return abandon(deps, record, unconfirmed);
    throw error;
  }
}

/**
 * Saves the import record with `patch` (renewing the runner's lease, then checking the feed is still
 * there). Progress of a chunk that wrote nothing (its rows all refused) is kept in memory for the next
 * save: the next chunk that writes, the first chunk ending QUIET_SAVE_MS or more after the last save, or
 * the end. Each save is three store calls, and a file of junk rows paid them every chunk
 * (docs/benchmarks.md "Refused rows").
 */
type Save = (patch: Partial<ImportRecord>, options?: { wroteNothing?: boolean }) => Promise<void>;

/** After this long since the last save, a chunk that wrote nothing saves its progress itself. */
const QUIET_SAVE_MS = 1000;

/** Thrown by a progress save (or the feed check while a chunk is prepared) that finds the feed deleted. */
class FeedGone extends Error {}

/** Calls a logging hook (onStart, onProgress, onFinish): a log line does not stop an import. */
function notify(hook: () => void): void {
  try {
    hook();
  } catch {
    // Nothing to do: the line is lost, the import goes on.
  }
}

/** How often the feed is looked at while a chunk is prepared or the feed file downloaded. */
const FEED_CHECK_MS = 2000;

/**
 * Looks at the feed every FEED_CHECK_MS until stopped; `signal` aborts once it is found gone, so that
 * work between two progress saves (a chunk's image fetches, the feed file's download) does not keep a
 * deletion waiting for it.
 */
function watchFeed(stillLive: () => Promise<boolean>): {
  signal: AbortSignal;
  gone: () => boolean;
  stop: () => void;
} {
  const found = new AbortController();
  const timer = setInterval(() => {
    stillLive().then(
      (live) => {
        if (!live) found.abort();
      },
      () => undefined,
    );
  }, FEED_CHECK_MS);
  timer.unref();
  return { signal: found.signal, gone: () => found.signal.aborted, stop: () => clearInterval(timer) };
}

/** Steps 2–6 of runImport, from the record marked running. */
async function importInto(
  deps: IngestDeps,
  current: () => ImportRecord,
  /** The failed runs the stored checkpoint counts (a failure resumes from there, not from current's). */
  savedAttempts: () => number,
  save: Save,
  unconfirmed: Set<string>,
  stillLive: () => Promise<boolean>,
  /** Renews the runner's lease right before a chunk is written (processRows). */
  renewLease: () => Promise<void>,
): Promise<ImportRecord> {
  await save({});
  try {
    const format = await ensureFeedFile(deps, current(), stillLive);
    if (current().format !== format) await save({ format });
    deps.signal?.throwIfAborted();
    const total = await countRows(await openFeed(deps, current().objectKey), format);
    await save({ total });
    deps.signal?.throwIfAborted();
    const outcome = await processRows(
      deps,
      current,
      await openFeed(deps, current().objectKey),
      format,
      save,
      unconfirmed,
      stillLive,
      renewLease,
    );
    // Whether a product of this file was actually imported: embedded, re-filed or unchanged, or failed
    // only to refresh its keypoints and kept its vectors (it is still searchable, as the file lists it). A
    // file whose valid rows all failed otherwise (every image unreachable: a CDN outage, images moved)
    // imported none.
    const done = current();
    const imported = importedAny(done) || outcome.keptVectors;
    const noneImported = outcome.valid > 0 && !imported;
    let kept = false;
    if (done.mode === 'full') {
      if (outcome.readToEnd && imported && outcome.unreadableRow === undefined) {
        await removeUnseen(deps, done, save);
      } else {
        // A file not read to its end, or listing no valid product, says nothing about the products it
        // does not list. One whose products all failed would leave the feed with nothing searchable. A row
        // that could not be read at all (broken JSON) may have listed any product: removing the products
        // the rest does not list could remove the one it held. The last two said only when some were kept.
        const unusable = !outcome.readToEnd || outcome.valid === 0;
        const message = unusable
          ? 'Products not in this file were kept: the file was not read to its end or listed no valid product.'
          : noneImported
            ? `Products not in this file were kept: ${noneOf(outcome.valid)}.`
            : `Products not in this file were kept: row ${outcome.unreadableRow} could not be read, and it may list one of them.`;
        kept = unusable || (await deps.products.listUnseen(done.feedId, done.importId)).length > 0;
        // (Once: a run resumed after a failed final save finds the note of the run before it saved.)
        const noted = current().errors.some((error) => error.row === null && error.message === message);
        if (kept && !noted)
          await save({ errors: capErrors(current().errors, [{ row: null, message, severity: 'warning' }]) });
      }
    }
    await flushIndices(deps);
    if (noneImported) {
      await save({
        status: 'failed',
        message: noneImportedMessage(current(), outcome.valid, outcome.firstImageError, kept),
        finishedAt: now(deps),
      });
    } else await save({ status: 'succeeded', finishedAt: now(deps) });
  } catch (error) {
    // Not failures of the import: the feed went away, or another runner carries on with it.
    if (error instanceof FeedGone || error instanceof LeaseLost) throw error;
    if (deps.signal?.aborted) {
      // Paused (a local stop, the worker's time budget): this run does not count as a failed attempt.
      await save({ attempts: Math.max(0, (current().attempts ?? 1) - 1) }).catch(() => undefined);
      throw error;
    }
    // An infrastructure failure (store, index) leaves the import running at its checkpoint: the retried
    // worker event, or the next local start, resumes it, unless it has failed there MAX_IMPORT_ATTEMPTS
    // times in a row (a failure that repeats is not passing). Problems with the feed itself end it.
    const record = current();
    const attempts = savedAttempts();
    const infrastructure = !(error instanceof DomainError || error instanceof FetchError);
    if (infrastructure && attempts < MAX_IMPORT_ATTEMPTS) throw error;
    // (Redacted: an error's message may quote a link, the feed's own included.)
    const message = redactUrls(
      infrastructure
        ? `Stopped after row ${record.checkpointRow}: the next rows failed ${attempts} times in a row (${error instanceof Error ? error.message : String(error)}).`
        : error.message,
    );
    await save({ status: 'failed', message, finishedAt: now(deps) });
  }
  return current();
}

/**
 * The import's feed was deleted (or is being deleted) under it: removes the products it wrote since its
 * last save whose records are its own (or its stale marks, or absent: vectors written before a failed
 * record write), with their vectors, features and words, then its own record, feed file and request
 * marker. A product of the same id that a new feed of the same id stored meanwhile is left alone. The
 * answer is the record as it would have ended, failed; it is not stored.
 */
async function abandon(
  deps: IngestDeps,
  record: ImportRecord,
  unconfirmed: ReadonlySet<string>,
): Promise<ImportRecord> {
  const { feedId, importId } = record;
  const candidates = [...unconfirmed];
  if (candidates.length > 0) {
    const stored = await deps.products.getMany(feedId, candidates);
    const ours = candidates.filter((id) => {
      const product = stored.get(id);
      return !product || product.seen_import === importId || product.update_hash === '';
    });
    const vectors = await deps.vectors();
    await vectors.deleteProducts(feedId, ours);
    await deps.localFeatures?.store.deleteProducts(feedId, ours);
    await deps.localFeatures?.words?.deleteProducts(feedId, ours);
    await flushIndices(deps);
    await deps.products.deleteMany(
      feedId,
      ours.filter((id) => stored.has(id)),
    );
  }
  await deps.imports.delete(feedId, importId);
  const keys = importObjectKeys(feedId, importId);
  await deps.objects.delete(keys.file);
  await deps.objects.delete(keys.request);
  return {
    ...record,
    status: 'failed',
    message: 'The feed was deleted while this import ran; what the import had stored was removed with it.',
    finishedAt: now(deps),
  };
}

/** Runs in a row that may fail at the same checkpoint with an infrastructure error before the import fails. */
const MAX_IMPORT_ATTEMPTS = 3;

function now(deps: Pick<IngestDeps, 'clock'>): string {
  return deps.clock.now().toISOString();
}

/** Makes sure the feed file is stored (URL imports stream it in) and returns its format. */
async function ensureFeedFile(
  deps: IngestDeps,
  record: ImportRecord,
  stillLive: () => Promise<boolean>,
): Promise<FeedFormat> {
  let head = await headOf(deps, record.objectKey);
  if (head === undefined) {
    if (record.source.kind !== 'url')
      throw new DomainError('not_found', 'The feed file of this import is missing.');
    await downloadFeedFile(deps, record, record.source.url, stillLive);
    head = (await headOf(deps, record.objectKey)) ?? '';
  }
  return record.format ?? sniffFormat(head);
}

/**
 * Streams a URL import's feed file into the store. It can take up to the feed fetch's timeout (minutes),
 * so a pause stops it, and so does the feed's deletion (seen within FEED_CHECK_MS): the deletion waits
 * for this run to let the feed go. A stopped download stores nothing.
 */
async function downloadFeedFile(
  deps: IngestDeps,
  record: ImportRecord,
  url: string,
  stillLive: () => Promise<boolean>,
): Promise<void> {
  const feed = watchFeed(stillLive);
  const signal = deps.signal ? AbortSignal.any([feed.signal, deps.signal]) : feed.signal;
  try {
    const { body, contentType } = await deps.fetcher.open(url, deps.limits.feed, { signal });
    await deps.feedFiles.write(record.objectKey, body, contentType ?? 'application/octet-stream');
  } catch (error) {
    if (feed.gone()) throw new FeedGone();
    deps.signal?.throwIfAborted();
    // The import's message says which fetch failed: "HTTP 404." alone reads like one of its images.
    if (error instanceof FetchError) throw new FetchError(`The feed URL could not be read: ${error.message}`);
    throw error;
  } finally {
    feed.stop();
  }
}

/** The first few KB of a stored file (enough to sniff its format), or undefined when it is not stored. */
async function headOf(deps: IngestDeps, key: string): Promise<string | undefined> {
  const body = await deps.feedFiles.read(key);
  if (!body) return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(Buffer.from(chunk));
    size += chunk.length;
    if (size >= 4096) break;
  }
  return headText(Buffer.concat(chunks).subarray(0, 4096));
}

/** A fresh stream of the stored feed file (each pass over the file reads it again). */
async function openFeed(deps: IngestDeps, key: string): Promise<AsyncIterable<Uint8Array>> {
  const body = await deps.feedFiles.read(key);
  if (!body) throw new DomainError('not_found', 'The feed file of this import is missing.');
  return body;
}

/**
 * The file's rows, the row where an unreadable rest begins (a JSON array cut short) included: processing
 * counts that one in `processed` and `failed`, and progress must not pass its total.
 */
async function countRows(file: AsyncIterable<Uint8Array>, format: FeedFormat): Promise<number> {
  let total = 0;
  for await (const raw of readFeed(file, format)) total = Math.max(total, raw.row);
  return total;
}

/** Longest row-error message an import record keeps (the record is one store item, at most 400 KB). */
const MAX_ERROR_MESSAGE = 500;

/**
 * The errors an import record keeps: the first MAX_IMPORT_ERRORS, each as text a store can hold and of a
 * bounded size, whatever a row put into its message or id (a message may quote the row's values). Past
 * the cap, failed rows go before warnings: a file whose products each miss an additional image must not
 * hide the rows that failed after them (the warnings kept are the earliest).
 */
export function capErrors(errors: ImportRowError[], more: RecordedImportProblem[]): ImportRowError[] {
  const all = [...errors, ...more];
  let kept = all;
  if (all.length > MAX_IMPORT_ERRORS) {
    // First the notes about the file as a whole (row null: products a full import kept, said nowhere
    // else), then failed rows, then warnings, each in the order recorded.
    const rank = (problem: ImportRowError) =>
      problem.row === null ? 0 : severityOf(problem) === 'error' ? 1 : 2;
    const keep = new Set(
      all
        .map((problem, index) => ({ index, rank: rank(problem) }))
        .sort((a, b) => a.rank - b.rank || a.index - b.index)
        .slice(0, MAX_IMPORT_ERRORS)
        .map(({ index }) => index),
    );
    kept = all.filter((_, index) => keep.has(index));
  }
  return kept.map((error) => ({
    ...error,
    ...(error.productId !== undefined ? { productId: errorProductId(error.productId) } : {}),
    message: wellFormed(
      error.message.length > MAX_ERROR_MESSAGE
        ? `${error.message.slice(0, MAX_ERROR_MESSAGE - 1)}…`
        : error.message,
    ),
  }));
}

async function processRows(
  deps: IngestDeps,
  current: () => ImportRecord,
  file: AsyncIterable<Uint8Array>,
  format: FeedFormat,
  save: Save,
  unconfirmed: Set<string>,
  stillLive: () => Promise<boolean>,
  renewLease: () => Promise<void>,
): Promise<{
  readToEnd: boolean;
  /**
   * Valid products, each id once (a repeated id is the later row's error), as an uninterrupted run counts
   * them; only a run resumed after a product was imported counts every valid row before its checkpoint
   * (then only `valid > 0` matters).
   */
  valid: number;
  unreadableRow: number | undefined;
  /** The first error of this run about a product's main image (it failed, or kept what it had). */
  firstImageError: ImportRowError | undefined;
  /** Whether a failed row's product kept its stored vectors (see keepUnfetchedFeatureRefreshes). */
  keptVectors: boolean;
}> {
  const start = current();
  const baseUrl = start.source.kind === 'url' ? linkBase(start.source.url) : undefined;
  let readToEnd = true;
  /** The first row the reader could not read at all (broken JSON): it may have listed any product. */
  let unreadableRow: number | undefined;
  let valid = 0;
  let firstImageError: ImportRowError | undefined;
  let keptVectors = false;
  // Valid rows before the checkpoint still to be looked up (countEarlierRows).
  let earlierRows: { row: number; productId: string }[] = [];
  // Once an earlier run imported a product, the rows before the checkpoint can change no decision of the
  // import's end (it imported one): they are not looked up in the store (countEarlierRows).
  const importedBefore = importedAny(start);
  let chunk: RawRecord[] = [];
  let previousIds = new Map<string, number>();
  // What the import noted about imported products' left-out fields, earlier runs' notes included (each
  // note once, at its first row).
  const noted = new Set(start.errors.map((error) => error.message).filter(isImportNote));
  // Two-stage pipeline: chunk k+1 is parsed, looked up and its images fetched while chunk k is embedded
  // and written. Checkpoints stay in file order because commits run one after another.
  let committing: Promise<void> = Promise.resolve();
  // A failed commit (its feed deleted, a store error) stops the next chunk's image fetches: its error is
  // seen once that preparation ends, and a deletion waits for this run to let the feed go.
  const commitFailed = new AbortController();
  // The feed is also looked at while a chunk is prepared (its images may take long to fetch): a deletion
  // waiting for this run is not kept waiting for a whole chunk's fetches.
  const feed = watchFeed(stillLive);
  // A pause stops the fetches as well; the chunk they belonged to is then not committed (the resumed run
  // starts again from the checkpoint before it).
  const stopFetching = AbortSignal.any([
    commitFailed.signal,
    feed.signal,
    ...(deps.signal ? [deps.signal] : []),
  ]);
  // One abort listener per image fetch in flight (IMAGE_FETCH_CONCURRENCY, up to 64): not a leak.
  setMaxListeners(0, stopFetching);
  // Pause at a checkpoint when asked: let the chunk in flight finish writing first. The checkpoints name
  // rows whose vectors and words a local index holds in memory only: they are saved before this run
  // stops, or the resumed run would skip rows whose vectors a restart lost.
  const pauseIfAsked = async () => {
    if (!deps.signal?.aborted) return;
    await committing;
    await flushIndices(deps);
    deps.signal.throwIfAborted();
  };
  const flush = async () => {
    if (chunk.length === 0) return;
    const prepared = await prepareChunk(deps, start, chunk, baseUrl, previousIds, noted, stopFetching);
    if (feed.gone()) throw new FeedGone();
    // (Prepared under a pause, the chunk is not committed: the resumed run prepares it again.)
    await pauseIfAsked();
    chunk = [];
    previousIds = prepared.rowOfId;
    valid += prepared.counted;
    await committing;
    for (const productId of prepared.rowOfId.keys()) unconfirmed.add(productId);
    // A checkpoint reached: this run is the first attempt at the rows after it.
    // The lease renewed right before the writes (10 more minutes): a runner that stalled past its lease
    // while the chunk was prepared, and lost it to another, writes nothing of it (LeaseLost). A chunk
    // with nothing to write needs no lease, and its progress waits for the next save (Save).
    const wroteNothing = writesNothing(prepared);
    committing = (wroteNothing ? Promise.resolve() : renewLease())
      .then(() => commitChunk(deps, prepared))
      .then((patch) => {
        // (The chunk's errors, its embedding errors included, as committed.)
        firstImageError ??= firstImageErrorOf(prepared.errors);
        keptVectors ||= prepared.keptVectors > 0;
        return save({ ...patch(current()), attempts: 1 }, { wroteNothing });
      });
    committing.catch(() => commitFailed.abort());
  };
  try {
    await readAndCommit();
  } finally {
    feed.stop();
    // Leaving with an error (a failed lookup of the next chunk, a broken stream): the chunk being
    // committed finishes first, so nothing of this run writes after runImport has returned or thrown.
    await committing.catch(() => undefined);
  }
  return { readToEnd, valid, unreadableRow, firstImageError, keptVectors };

  async function readAndCommit(): Promise<void> {
    for await (const raw of readFeed(file, format)) {
      const fatal = 'fatal' in raw && raw.fatal === true;
      if (fatal) readToEnd = false;
      // Rows before a checkpoint are read again on a resumed run: one unreadable there counts too.
      else if ('error' in raw && raw.unreadable) unreadableRow ??= raw.row;
      if (raw.row <= start.checkpointRow) {
        // Done before an interruption: its product is already stored and marked as seen by this import
        // (a row that was refused then is refused again: it is not a valid product; a cut-short end there
        // was counted and reported by the chunk that holds it, not again: processed 3 of 2).
        const productId = 'fields' in raw ? validProductId(raw.fields, baseUrl) : undefined;
        if (productId === undefined) continue;
        if (importedBefore) valid += 1;
        else {
          earlierRows.push({ row: raw.row, productId });
          if (earlierRows.length >= deps.limits.chunkSize) await countEarlierRows();
        }
        continue;
      }
      chunk.push(raw);
      if (chunk.length >= deps.limits.chunkSize) {
        await flush();
        await pauseIfAsked();
      }
    }
    await countEarlierRows();
    await flush();
    await committing;
  }

  /**
   * Counts the valid rows before the checkpoint as the runs that did them counted them: a row whose id an
   * earlier row had is a duplicate (its stored product names that row, as prepareChunk tells them apart).
   * Nothing was imported before the checkpoint, so a product there with vectors is one that kept them.
   */
  async function countEarlierRows(): Promise<void> {
    if (earlierRows.length === 0) return;
    const rows = earlierRows;
    earlierRows = [];
    const stored = await deps.products.getMany(
      start.feedId,
      rows.map((r) => r.productId),
    );
    for (const { row, productId } of rows) {
      const product = stored.get(productId);
      if (earlierRowOf(product, start.importId, row) !== undefined) continue;
      valid += 1;
      if (product?.seen_import === start.importId && product.vector_count > 0) keptVectors = true;
    }
  }
}

/** Whether the import recorded a product as imported: embedded, re-filed or skipped as unchanged. */
function importedAny(record: Pick<ImportRecord, 'embedded' | 'updated' | 'skipped'>): boolean {
  return record.embedded + (record.updated ?? 0) + record.skipped > 0;
}

/**
 * The earlier row of this import that a stored product was seen at, when `row` repeats its id (a run
 * before a checkpoint stored it); undefined when the product is this row's or not this import's.
 */
function earlierRowOf(product: Product | undefined, importId: string, row: number): number | undefined {
  if (product?.seen_import !== importId || product.seen_row === undefined || product.seen_row === row)
    return undefined;
  return product.seen_row;
}

/** Most notes an import records in its errors: they must not crowd out its rows' failures. */
const MAX_NOTES = 10;

/**
 * Whether a note about an imported product (a metadata field left out) is new to this import: a CSV
 * column with a name the import does not keep is noted at its first row, not at each, and at most
 * MAX_NOTES distinct notes are recorded (`noted` starts with those of the runs before a resumed one).
 */
function noteOnce(noted: Set<string>, note: string): boolean {
  if (noted.has(note) || noted.size >= MAX_NOTES) return false;
  noted.add(note);
  return true;
}

/** "not one of the file's 3 valid products could be imported" (a file whose valid products all failed). */
function noneOf(valid: number): string {
  return valid === 1
    ? "the file's one valid product could not be imported"
    : `not one of the file's ${valid} valid products could be imported`;
}

/** The product id of a row whose fields make a product (normaliseRecord accepts them), else undefined. */
function validProductId(
  fields: Parameters<typeof normaliseRecord>[0],
  baseUrl: string | undefined,
): string | undefined {
  try {
    return normaliseRecord(fields, baseUrl).product_id;
  } catch (error) {
    if (error instanceof RowError) return undefined;
    throw error;
  }
}

/** How the error of a product's main image that could not be fetched or embedded begins. */
const MAIN_IMAGE_FAILURE = /^image_link https?:\/\//;

/**
 * The error about a product's main image (it could not be fetched or embedded) of the earliest row among
 * `errors` (a chunk's images are fetched at once: their errors come in the order the fetches ended).
 */
function firstImageErrorOf(errors: readonly ImportRowError[]): ImportRowError | undefined {
  let first: (ImportRowError & { row: number }) | undefined;
  for (const { row, ...error } of errors) {
    // (Not a row refused for its image_link field, "image_link is missing.": it was no valid product.)
    if (row === null || error.productId === undefined || !MAIN_IMAGE_FAILURE.test(error.message)) continue;
    if (!first || row < first.row) first = { row, ...error };
  }
  return first;
}

/**
 * Why an import whose file listed valid products, not one of which could be imported, failed: their
 * number and the first main-image error (the import's own errors first: they begin with the rows of
 * earlier runs).
 */
function noneImportedMessage(
  record: ImportRecord,
  valid: number,
  firstOfThisRun: ImportRowError | undefined,
  /** Whether a full import kept products its file does not list. */
  kept: boolean,
): string {
  const found = firstImageErrorOf(record.errors) ?? firstOfThisRun;
  const first = found && capErrors([found], [])[0]!;
  const none = noneOf(valid);
  const summary = `${none[0]!.toUpperCase()}${none.slice(1)}.`;
  const cause = first
    ? ` The first error, row ${first.row}${first.productId !== undefined ? ` (id ${first.productId})` : ''}: ${first.message}${/[.!?…]$/.test(first.message) ? '' : '.'}`
    : '';
  return `${summary}${cause}${kept ? ' Products not in this file were kept.' : ''}`;
}

/** Makes the vector and word indices' writes durable (local files; a no-op for OpenSearch). */
async function flushIndices(deps: IngestDeps): Promise<void> {
  await (await deps.vectors()).flush();
  await deps.localFeatures?.words?.flush();
}

interface FetchedImage {
  product: Product;
  url: string;
  index: number;
  bytes: Buffer;
}

interface PreparedChunk {
  rows: RawRecord[];
  rowOfId: Map<string, number>;
  errors: RecordedImportProblem[];
  /**
   * The additional images that could not be fetched: recorded (as warnings) once the chunk is embedded,
   * for the products imported without them only (a product whose main image failed is one failed row,
   * with that one error).
   */
  additionalImageErrors: RecordedImportProblem[];
  failed: number;
  skipped: number;
  /** Rows that are valid, non-duplicate products. */
  counted: number;
  /** Failed rows whose products kept their stored vectors (keepUnfetchedFeatureRefreshes). */
  keptVectors: number;
  keep: Product[];
  changed: Product[];
  /** Changed products that had vectors before (their old documents are removed first). */
  replaced: string[];
  /** Products whose content changed but not their images: vectors reused, re-filed with the new fields. */
  updated: number;
  refreshed: VectorDocument[];
  /** Kept products that moved item group: their visual words go (keepUnfetchedFeatureRefreshes). */
  unfiledWords: string[];
  /**
   * Kept products whose vectors come from a stale mark: their documents, features and words past
   * `vectorCount`, which a stopped run may have written, go.
   */
  trimmed: { productId: string; vectorCount: number }[];
  feedId: string;
  /**
   * The stored records of the products whose vectors or features this chunk rewrites, with their
   * update_hash and embedded_model cleared: written before anything else of the chunk, so that if the
   * chunk stops half way the next import of any version of the feed finds them changed and embeds them
   * again, instead of skipping them (or reusing their vectors) when those are already the new ones.
   */
  stale: Product[];
  images: FetchedImage[];
  embedder: Embedder | undefined;
}

/**
 * Whether committing the chunk writes nothing to the stores (its rows all refused or repeated): every
 * product it counts is written as kept or changed, and its other writes (stale records, re-filed vectors,
 * unfiled words) are of those products.
 */
function writesNothing(chunk: PreparedChunk): boolean {
  return chunk.keep.length === 0 && chunk.changed.length === 0;
}

/**
 * First stage of a chunk: normalise rows (bad rows → errors), drop repeated ids (within the chunk, the
 * previous chunk, or earlier rows of this import), tell unchanged products from changed ones, and fetch
 * and inspect the images of the changed ones. Writes nothing.
 */
async function prepareChunk(
  deps: IngestDeps,
  record: ImportRecord,
  rows: RawRecord[],
  baseUrl: string | undefined,
  previousIds: Map<string, number>,
  /** Notes of this import so far (noteOnce). */
  noted: Set<string>,
  /** Aborted when the chunk before fails: no more images are fetched (the chunk is not committed). */
  stop: AbortSignal,
): Promise<PreparedChunk> {
  const errors: RecordedImportProblem[] = [];
  let failed = 0;
  let skipped = 0;
  const valid: Valid[] = [];
  const rowOfId = new Map<string, number>();
  const duplicate = (row: number, productId: string, earlier: number) => {
    errors.push({ row, productId, message: `Duplicate id; row ${earlier} was imported.`, severity: 'error' });
    failed += 1;
  };
  // Repeats of an id an earlier row of this chunk has: reported once the store lookup below has told
  // which row was imported (the earlier row of this chunk may itself repeat one stored before).
  const repeats: { row: number; productId: string }[] = [];
  for (const raw of rows) {
    if ('error' in raw) {
      errors.push({ row: raw.row, message: raw.error, severity: 'error' });
      failed += 1;
      continue;
    }
    try {
      const notes: string[] = [];
      const content = normaliseRecord(raw.fields, baseUrl, notes);
      if (rowOfId.has(content.product_id)) {
        repeats.push({ row: raw.row, productId: content.product_id });
        continue;
      }
      const earlier = previousIds.get(content.product_id);
      if (earlier !== undefined) {
        duplicate(raw.row, content.product_id, earlier);
        continue;
      }
      rowOfId.set(content.product_id, raw.row);
      valid.push({ row: raw.row, content, notes });
    } catch (error) {
      if (!(error instanceof RowError)) throw error;
      const id = raw.fields.id?.[0] ?? raw.fields.product_id?.[0];
      errors.push({
        row: raw.row,
        ...(id !== undefined ? { productId: errorProductId(id) } : {}),
        message: error.message,
        severity: 'error',
      });
      failed += 1;
    }
  }

  const { embedder } = valid.length > 0 ? await deps.vision() : { embedder: undefined };
  const existing = await deps.products.getMany(
    record.feedId,
    valid.map((v) => v.content.product_id),
  );
  const at = now(deps);
  const keep: Product[] = [];
  const changed: Product[] = [];
  const replaced: string[] = [];
  const refresh: { product: Product; before: Product }[] = [];
  // Products that keep the vectors of a stale mark: a run stopped after the mark may have written
  // documents past their count (an additional image it could fetch), which go (PreparedChunk.trimmed).
  const trimmed: Product[] = [];
  // Products fetched again only because their stored features are of an older recipe (same images, same
  // embedding model): if their images cannot be fetched this time, they keep what they have.
  const featureRefresh: { product: Product; before: Product }[] = [];
  let counted = 0;
  // Products whose stored vectors are of the images and model this import lists (see `stale` below).
  const sameVectors = new Set<string>();
  // Ids whose first row in this chunk repeats a row stored before: the row their repeats name.
  const storedRowOf = new Map<string, number>();
  for (const { row, content, notes } of valid) {
    const before = existing.get(content.product_id);
    const earlier = earlierRowOf(before, record.importId, row);
    if (earlier !== undefined) {
      rowOfId.delete(content.product_id);
      storedRowOf.set(content.product_id, earlier);
      duplicate(row, content.product_id, earlier);
      continue;
    }
    counted += 1;
    for (const note of notes.filter((text) => noteOnce(noted, text)))
      errors.push({ row, productId: content.product_id, message: note, severity: 'warning' });
    const hash = contentHash(content);
    const seen = { seen_import: record.importId, seen_row: row };
    // Products stored before local features existed, or with features of another recipe, are embedded
    // once more, to get current ones.
    const hasFeatures =
      !deps.localFeatures ||
      (before?.local_features === CATALOGUE_FEATURES_VERSION &&
        (!deps.localFeatures.words || before.visual_words === VISUAL_WORDS_VERSION));
    if (
      before &&
      before.update_hash === hash &&
      before.embedded_model === embedder?.modelVersion &&
      hasFeatures
    ) {
      keep.push({ ...before, ...seen });
      skipped += 1;
      continue;
    }
    // (A stale mark's content is the one it was made from: its version stays unless the content changed.)
    const sameContent = before !== undefined && storedHashOf(before) === hash;
    const product: Product = {
      ...content,
      feed_id: record.feedId,
      id: before?.id ?? randomUUID(),
      group: groupOf(content),
      update_hash: hash,
      version: before ? (sameContent ? before.version : before.version + 1) : 1,
      created_at: before?.created_at ?? at,
      updated_at: before && sameContent ? before.updated_at : at,
      vector_count: 0,
      ...seen,
    };
    const vectorsStillValid =
      before !== undefined &&
      before.vector_count > 0 &&
      before.embedded_model === embedder?.modelVersion &&
      imagesOf(before).join('\n') === imagesOf(content).join('\n');
    if (vectorsStillValid) sameVectors.add(content.product_id);
    if (vectorsStillValid && hasFeatures) refresh.push({ product, before });
    else {
      if (before && before.vector_count > 0) replaced.push(content.product_id);
      if (vectorsStillValid) featureRefresh.push({ product, before });
      changed.push(product);
    }
  }
  for (const { row, productId } of repeats)
    duplicate(row, productId, storedRowOf.get(productId) ?? rowOfId.get(productId)!);
  const refreshed = embedder
    ? await reuseVectors(deps, record.feedId, refresh)
    : { documents: [], missing: [], moved: [] };
  for (const { product, before } of refresh) {
    const moved = refreshed.moved.includes(product.product_id);
    if (moved || refreshed.missing.includes(product.product_id)) {
      replaced.push(product.product_id);
      changed.push(product);
      // Its images did not change: if they cannot be fetched now, it keeps its vectors, as an
      // older-recipe product does.
      if (moved) featureRefresh.push({ product, before });
    } else {
      product.vector_count = before.vector_count;
      product.embedded_model = before.embedded_model;
      if (before.local_features !== undefined) product.local_features = before.local_features;
      if (before.visual_words !== undefined) product.visual_words = before.visual_words;
      keep.push(product);
      if (before.update_hash === '') trimmed.push(product);
    }
  }
  const updated = refresh.length - refreshed.missing.length - refreshed.moved.length;
  const { images, additionalImageErrors } = embedder
    ? await fetchImages(deps, changed, rowOfId, errors, stop)
    : { images: [], additionalImageErrors: [] };
  const unfetched = await keepUnfetchedFeatureRefreshes(
    deps,
    record.feedId,
    featureRefresh,
    images,
    rowOfId,
    errors,
  );
  failed += unfetched.kept.length;
  keep.push(...unfetched.kept);
  trimmed.push(...unfetched.kept.filter((p) => existing.get(p.product_id)?.update_hash === ''));
  const stays = new Set(unfetched.kept.map((p) => p.product_id));
  const embedding = changed.filter((p) => !stays.has(p.product_id));
  const refiled = [...refreshed.documents, ...unfetched.documents];
  // Every product whose vectors this chunk replaces or re-files.
  const rewritten = new Set([...embedding.map((p) => p.product_id), ...refiled.map((d) => d.productId)]);
  // A product whose images or model changed may be left with vectors of the new images under a record
  // naming the old ones: its model is cleared too, so no import reuses or keeps those vectors. Its images
  // and model unchanged, the vectors written are the same images' embeddings: it keeps its model, so the
  // run that redoes it re-files or keeps them as an uninterrupted run does (reuseVectors,
  // keepUnfetchedFeatureRefreshes). Its features, words and group stay the old record's: one of an older
  // recipe or another group is fetched and extracted again.
  const stale = [...rewritten].flatMap((productId) => {
    const before = existing.get(productId);
    if (!before) return [];
    const hash = storedHashOf(before);
    const mark: Product = { ...before, update_hash: '', ...(hash !== undefined ? { stale_hash: hash } : {}) };
    if (!sameVectors.has(productId)) mark.embedded_model = '';
    return [mark];
  });
  return {
    stale,
    rows,
    rowOfId,
    errors,
    failed,
    skipped,
    updated,
    counted,
    keptVectors: unfetched.kept.length,
    keep,
    changed: embedding,
    replaced: replaced.filter((id) => !stays.has(id)),
    images,
    additionalImageErrors,
    refreshed: refiled,
    unfiledWords: unfetched.unfiled,
    trimmed: trimmed.map((p) => ({ productId: p.product_id, vectorCount: p.vector_count })),
    feedId: record.feedId,
    embedder,
  };
}

/**
 * A product fetched again only to re-extract its local features (a newer feature recipe, or a move to
 * another item group, under which its visual words are filed) whose main image could not be fetched
 * keeps its stored vectors and features (re-filed under its current fields, like `reuseVectors`) instead
 * of leaving search over what may be a passing network error; it stays on the old recipe, so the next
 * import tries again. One that moved group loses its visual words instead (`unfiled`: filed under the
 * group it left, they would show it under that group too) and is marked without them, so the next import
 * extracts them again. Its row counts as failed, with a note added to its fetch error, but the import is
 * not failed for it (its product is still searchable).
 */
async function keepUnfetchedFeatureRefreshes(
  deps: IngestDeps,
  feedId: string,
  featureRefresh: { product: Product; before: Product }[],
  images: FetchedImage[],
  rowOf: Map<string, number>,
  errors: RecordedImportProblem[],
): Promise<{ kept: Product[]; documents: VectorDocument[]; unfiled: string[] }> {
  const fetched = new Set(images.map((image) => image.product.product_id));
  const unfetched = featureRefresh.filter(({ product }) => !fetched.has(product.product_id));
  if (unfetched.length === 0) return { kept: [], documents: [], unfiled: [] };
  const reused = await reuseVectors(deps, feedId, unfetched, { refileMoved: true });
  const kept: Product[] = [];
  for (const { product, before } of unfetched) {
    if (reused.missing.includes(product.product_id)) continue;
    product.vector_count = before.vector_count;
    product.embedded_model = before.embedded_model;
    if (before.local_features !== undefined) product.local_features = before.local_features;
    if (before.visual_words !== undefined && !reused.moved.includes(product.product_id))
      product.visual_words = before.visual_words;
    kept.push(product);
    // The note goes on this row's main-image error only (not on a duplicate row of the same id, nor on
    // an additional image's error).
    const row = rowOf.get(product.product_id);
    const fetchError = errors.find(
      (error) =>
        error.row === row && error.productId === product.product_id && MAIN_IMAGE_FAILURE.test(error.message),
    );
    if (fetchError)
      fetchError.message +=
        ' The product keeps its stored vectors and local features until an import can fetch it.';
  }
  return { kept, documents: reused.documents, unfiled: reused.moved };
}

/**
 * Products whose content changed but whose images did not keep their vectors: the stored vectors are
 * re-filed under the new filter fields instead of fetching and embedding the images again. Products whose
 * vectors are not all in the index come back as `missing` (they are embedded again). Those that moved to
 * another item group while a word index is kept come back as `moved`: their stored visual words are filed
 * under the old group, and re-extracting is simpler than a second re-filing path, so they are embedded
 * again too; with `refileMoved` (their images could not be fetched) their vectors are re-filed as well.
 */
async function reuseVectors(
  deps: IngestDeps,
  feedId: string,
  refresh: { product: Product; before: Product }[],
  { refileMoved = false } = {},
): Promise<{ documents: VectorDocument[]; missing: string[]; moved: string[] }> {
  if (refresh.length === 0) return { documents: [], missing: [], moved: [] };
  const ids = refresh.flatMap(({ before }) =>
    Array.from({ length: before.vector_count }, (_, i) => vectorDocumentId(feedId, before.product_id, i)),
  );
  const stored = await (await deps.vectors()).getVectors(ids);
  const documents: VectorDocument[] = [];
  const missing: string[] = [];
  const moved: string[] = [];
  for (const { product, before } of refresh) {
    const own = Array.from({ length: before.vector_count }, (_, i) =>
      vectorDocumentId(feedId, before.product_id, i),
    );
    if (own.some((id) => !stored.has(id))) {
      missing.push(product.product_id);
      continue;
    }
    if (deps.localFeatures?.words !== undefined && product.group !== before.group) {
      moved.push(product.product_id);
      if (!refileMoved) continue;
    }
    for (const id of own) {
      documents.push({
        id,
        feedId,
        productId: product.product_id,
        itemGroupId: product.group,
        vector: stored.get(id)!,
        fields: filterFieldsOf(product),
      });
    }
  }
  return { documents, missing, moved };
}

/** The update_hash of a stored record, or of the record its stale mark was made from (undefined: unknown). */
function storedHashOf(product: Product): string | undefined {
  return product.update_hash === '' ? product.stale_hash : product.update_hash;
}

/**
 * Removes the documents, features and words of kept products past their vector count (PreparedChunk.trimmed):
 * a run stopped after their stale marks may have embedded more of their images than they keep.
 */
async function trimKept(
  deps: IngestDeps,
  feedId: string,
  trimmed: { productId: string; vectorCount: number }[],
): Promise<void> {
  const ids = trimmed.map((t) => t.productId);
  const refs = trimmed.flatMap(({ productId, vectorCount }) =>
    Array.from({ length: vectorCount }, (_, imageIndex) => ({ feedId, productId, imageIndex })),
  );
  const documents = refs.map((ref) => vectorDocumentId(feedId, ref.productId, ref.imageIndex));
  await (await deps.vectors()).deleteProducts(feedId, ids, documents);
  await deps.localFeatures?.store.deleteProducts(feedId, ids, refs);
  await deps.localFeatures?.words?.deleteProducts(feedId, ids, documents);
}

/**
 * Second stage of a chunk: embed the fetched images, replace the changed products' vectors, write the
 * products (marked as seen), and return the progress to checkpoint, relative to the import as it is then.
 */
async function commitChunk(
  deps: IngestDeps,
  chunk: PreparedChunk,
): Promise<(record: ImportRecord) => Partial<ImportRecord>> {
  const { errors, changed } = chunk;
  let failed = chunk.failed;
  let embedded = 0;
  if (chunk.stale.length > 0) await deps.products.putMany(chunk.stale);
  // Before their vectors are filed under the new group, so that no search finds a product in both.
  if (chunk.unfiledWords.length > 0)
    await deps.localFeatures?.words?.deleteProducts(chunk.feedId, chunk.unfiledWords);
  if (chunk.refreshed.length > 0) await (await deps.vectors()).upsert(chunk.refreshed);
  if (chunk.trimmed.length > 0) await trimKept(deps, chunk.feedId, chunk.trimmed);
  if (changed.length > 0 && chunk.embedder) {
    const vectors = await deps.vectors();
    // The embedder runs on its own threads while features are extracted on this one.
    const [embeddedImages, features] = await Promise.all([
      embedImages(chunk.embedder, chunk.images, chunk.rowOfId, errors),
      extractFeatures(deps, chunk.images),
    ]);
    const documents = embeddedImages.map((e) => e.document);
    const { feedId } = chunk;
    // The new images replace the old ones in place (same document ids and feature keys), so a changed
    // product stays searchable and verifiable throughout; then what they did not replace goes: images
    // beyond the new count, and the features and words of an image whose new extraction failed.
    if (documents.length > 0) await vectors.upsert(documents);
    await storeFeatures(deps, embeddedImages, features);
    if (chunk.replaced.length > 0) {
      const withFeatures = embeddedImages.filter((e) => features.has(e.image));
      await vectors.deleteProducts(
        feedId,
        chunk.replaced,
        documents.map((d) => d.id),
      );
      await deps.localFeatures?.store.deleteProducts(
        feedId,
        chunk.replaced,
        withFeatures.map((e) => ({ feedId, productId: e.document.productId, imageIndex: e.imageIndex })),
      );
      await deps.localFeatures?.words?.deleteProducts(
        feedId,
        chunk.replaced,
        withFeatures.map((e) => e.document.id),
      );
    }
    if (deps.localFeatures) {
      for (const product of changed)
        if (product.vector_count > 0) {
          product.local_features = CATALOGUE_FEATURES_VERSION;
          if (deps.localFeatures.words) product.visual_words = VISUAL_WORDS_VERSION;
        }
    }
    for (const product of changed) {
      if (product.vector_count > 0) embedded += 1;
      else failed += 1;
    }
  }
  // A local index holds its writes in memory until it flushes: they are saved before the records that
  // point at them, or a process killed in between leaves records (with their update hash) that a resumed
  // or later import skips although their vectors or words are gone. Vectors: 13 ms per chunk at 10k
  // vectors, 158 ms at 100k (docs/benchmarks.md "Vectors saved per import chunk"); words: the chunk's
  // changes appended to the feed's word journal (the file itself is rewritten only now and then, see
  // LocalVisualWordIndex). No-ops for OpenSearch.
  await (await deps.vectors()).flush();
  await deps.localFeatures?.words?.flush();
  await deps.products.putMany([...chunk.keep, ...changed]);
  const imported = new Set(changed.filter((p) => p.vector_count > 0).map((p) => p.product_id));
  return (record) => ({
    processed: record.processed + chunk.rows.length,
    embedded: record.embedded + embedded,
    skipped: record.skipped + chunk.skipped,
    updated: (record.updated ?? 0) + chunk.updated,
    failed: record.failed + failed,
    // (By row within the chunk: its refused rows are recorded before its image errors.)
    errors: capErrors(
      record.errors,
      [...errors, ...chunk.additionalImageErrors.filter((problem) => imported.has(problem.productId!))].sort(
        (a, b) => (a.row ?? Infinity) - (b.row ?? Infinity),
      ),
    ),
    checkpointRow: chunk.rows[chunk.rows.length - 1]?.row ?? record.checkpointRow,
  });
}

/**
 * Fetches and inspects the images of changed products (bounded concurrency): a main image's failure is
 * the product's error; additional images' failures are returned, for the commit to record once it knows
 * which products were imported (PreparedChunk.additionalImageErrors).
 */
async function fetchImages(
  deps: IngestDeps,
  products: Product[],
  rowOf: Map<string, number>,
  errors: RecordedImportProblem[],
  stop: AbortSignal,
): Promise<{ images: FetchedImage[]; additionalImageErrors: RecordedImportProblem[] }> {
  const jobs = products.flatMap((product) =>
    imagesOf(product).map((url, index) => ({ product, url, index })),
  );
  const additionalImageErrors: RecordedImportProblem[] = [];
  const fetched = await mapLimit(jobs, deps.limits.imageConcurrency, async (job) => {
    if (stop.aborted) return undefined;
    try {
      const { bytes } = await deps.fetcher.fetch(job.url, deps.limits.image, { signal: stop });
      await deps.images.inspect(bytes);
      return { ...job, bytes };
    } catch (error) {
      // Stopped part way: the chunk is not committed, so its fetch is not the product's error.
      if (stop.aborted) return undefined;
      if (!(error instanceof FetchError || error instanceof DomainError)) throw error;
      const field = job.index === 0 ? 'image_link' : 'additional_image_link';
      // The link names the image, so a refused image's own problem follows it ("BMP is not a supported…").
      const reason = error instanceof InvalidImageError ? `${error.refusal.problem}.` : error.message;
      // The link redacted (a signed CDN link, a password: the record is shown and the fetch is done), then
      // shortened (up to 2,048 characters), so that the reason stays in the stored message.
      const link = redactUrl(job.url);
      (job.index === 0 ? errors : additionalImageErrors).push({
        row: rowOf.get(job.product.product_id) ?? null,
        productId: job.product.product_id,
        message: `${field} ${link.length > 200 ? `${link.slice(0, 199)}…` : link}: ${reason}`,
        // Without its main image a product is not imported; without another one, it is.
        severity: job.index === 0 ? 'error' : 'warning',
      });
      return undefined;
    }
  });
  // Only products whose main image is usable get vectors; their other images follow in order.
  const usable = new Set(fetched.filter((f) => f?.index === 0).map((f) => f!.product.product_id));
  return {
    images: fetched.filter((f): f is FetchedImage => f !== undefined && usable.has(f.product.product_id)),
    additionalImageErrors,
  };
}

/**
 * Embeds fetched images into vector documents. A product whose main image cannot be embedded keeps no
 * vectors (and counts as failed); a failed additional image is reported and skipped.
 */
async function embedImages(
  embedder: Embedder,
  images: FetchedImage[],
  rowOf: Map<string, number>,
  errors: RecordedImportProblem[],
): Promise<{ document: VectorDocument; image: FetchedImage; imageIndex: number }[]> {
  const vectors = await embedEach(
    embedder,
    images.map((i) => i.bytes),
  );
  const documents: { document: VectorDocument; image: FetchedImage; imageIndex: number }[] = [];
  images.forEach((image, i) => {
    const vector = vectors[i];
    const product = image.product;
    // (A product's main image comes before its others: one whose main image could not be embedded is a
    // failed row, with that one error.)
    if (image.index > 0 && product.vector_count === 0) return;
    if (!(vector instanceof Float32Array)) {
      // A refusal found while the pixels were decoded says what it found, as one at the header does.
      const problem = vector?.refusal.problem ?? 'the image could not be decoded or embedded';
      errors.push({
        row: rowOf.get(product.product_id) ?? null,
        productId: product.product_id,
        message: `${image.index === 0 ? 'image_link' : 'additional_image_link'} ${redactUrl(image.url)}: ${problem}.`,
        severity: image.index === 0 ? 'error' : 'warning',
      });
      return;
    }
    const index = product.vector_count;
    product.vector_count += 1;
    product.embedded_model = embedder.modelVersion;
    documents.push({
      document: {
        id: vectorDocumentId(product.feed_id, product.product_id, index),
        feedId: product.feed_id,
        productId: product.product_id,
        itemGroupId: product.group,
        vector,
        fields: filterFieldsOf(product),
      },
      image,
      imageIndex: index,
    });
  });
  return documents;
}

/**
 * Catalogue local features of each fetched image (both orientations). An image whose extraction fails
 * (or a matcher that cannot load) gets none: search treats it as unverifiable, the product is not failed.
 */
async function extractFeatures(
  deps: IngestDeps,
  images: FetchedImage[],
): Promise<Map<FetchedImage, LocalFeatures>> {
  const out = new Map<FetchedImage, LocalFeatures>();
  if (!deps.localFeatures || images.length === 0) return out;
  let matcher: LocalFeatureMatcher;
  try {
    matcher = await deps.localFeatures.matcher();
  } catch {
    return out;
  }
  for (const image of images) {
    try {
      out.set(image, await matcher.extract(image.bytes, 'catalogue'));
    } catch {
      // Recorded as nothing: verification treats a missing record as "no features".
    }
  }
  return out;
}

/** Stores the features of the embedded images under their vector documents' addresses. */
async function storeFeatures(
  deps: IngestDeps,
  embedded: { document: VectorDocument; image: FetchedImage; imageIndex: number }[],
  features: Map<FetchedImage, LocalFeatures>,
): Promise<void> {
  const store = deps.localFeatures?.store;
  if (!store) return;
  await mapLimit(embedded, deps.limits.imageConcurrency, async ({ document, image, imageIndex }) => {
    const found = features.get(image);
    if (found) await store.put({ feedId: document.feedId, productId: document.productId, imageIndex }, found);
  });
  const words = deps.localFeatures?.words;
  if (!words) return;
  const documents: VisualWordDocument[] = [];
  for (const { document, image } of embedded) {
    const found = features.get(image);
    if (!found) continue;
    const { id, feedId, productId, itemGroupId } = document;
    documents.push({ id, feedId, productId, itemGroupId, words: visualWords(found) });
  }
  if (documents.length > 0) await words.upsert(documents);
}

/**
 * Embeds in EMBED_LANES concurrent batches (the model runs one thread per call, so two calls use two cores);
 * when a batch fails, image by image so one bad image cannot sink the others; an image refused while it is
 * decoded is its refusal, for the import's error to say why.
 */
async function embedEach(
  embedder: Embedder,
  images: Buffer[],
): Promise<(Float32Array | InvalidImageError | undefined)[]> {
  if (images.length === 0) return [];
  const size = Math.ceil(images.length / EMBED_LANES);
  const batches: Buffer[][] = [];
  for (let i = 0; i < images.length; i += size) batches.push(images.slice(i, i + size));
  const results = await Promise.all(
    batches.map(async (batch) => {
      try {
        return await embedder.embed(batch);
      } catch (error) {
        if (!(error instanceof DomainError)) throw error;
        return Promise.all(
          batch.map((image) =>
            embedder.embed([image]).then(
              (v) => v[0],
              (failure: unknown) => (failure instanceof InvalidImageError ? failure : undefined),
            ),
          ),
        );
      }
    }),
  );
  return results.flat();
}

const EMBED_LANES = 2;

/**
 * The feed's URL as the base of its relative links, without its userinfo, query and fragment: a resolved
 * link is stored as the product's `image_link` or `link` and shown in search answers, where the feed's
 * `user:pass@` must not be (a relative link took it with it), nor its `?token=` (a placeholder link `#`
 * keeps the base's query). Images behind the feed's basic auth need absolute links of their own.
 */
function linkBase(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    parsed.search = '';
    parsed.hash = '';
    return parsed.href;
  } catch {
    return url;
  }
}

/**
 * Removes the products a full import did not list, 500 at a time: vectors and features first, then the
 * store; each batch is counted in `removed` by a progress save, so a removal resumed after a crash adds
 * to what the crashed run removed (a batch deleted but not yet saved when the process died is not
 * counted).
 */
async function removeUnseen(deps: IngestDeps, record: ImportRecord, save: Save): Promise<void> {
  const ids = await deps.products.listUnseen(record.feedId, record.importId);
  const vectors = await deps.vectors();
  let removed = record.removed;
  for (let i = 0; i < ids.length; i += 500) {
    const batch = ids.slice(i, i + 500);
    await vectors.deleteProducts(record.feedId, batch);
    await deps.localFeatures?.store.deleteProducts(record.feedId, batch);
    await deps.localFeatures?.words?.deleteProducts(record.feedId, batch);
    // Saved before the records go: a process killed in between leaves records without vectors or words,
    // which the resumed removal deletes, instead of vectors and words of products that are gone.
    await flushIndices(deps);
    await deps.products.deleteMany(record.feedId, batch);
    removed += batch.length;
    await save({ removed });
    // A pause (the worker's time budget, a local stop) takes effect between batches too.
    deps.signal?.throwIfAborted();
  }
}

/**
 * The entry of the worker and of the local dispatcher: runs the import a trigger names, in its feed's
 * order. Steps:
 * 1. a trigger for an import that no longer exists (its feed was deleted meanwhile) is dropped instead of
 *    being retried into the dead-letter queue;
 * 2. take the feed's lease; when another runner (or the feed's deletion) holds it, throw ImportDeferred:
 *    the worker's event is retried later (a live holder runs this import meanwhile, see 4; a dead one's
 *    lease has expired by then);
 * 3. run the feed's unfinished imports oldest first (the named one among them), each with runImport,
 *    renewing the lease at every progress save, so the catalogue ends as the newest import left it;
 * 4. give the lease up, and look once more: an import queued while the lease was held, whose own trigger
 *    found it held, is run now (lease taken again).
 * Answers the named import as it ended; undefined when it does not exist.
 */
export async function runTriggeredImport(
  deps: IngestDeps,
  feedId: string,
  importId: string,
): Promise<ImportRecord | undefined> {
  if (!(await deps.imports.get(feedId, importId))) {
    // No such import (its feed was deleted between its start's check and its trigger): what the start
    // wrote after the deletion's sweep of imports/ goes.
    const keys = importObjectKeys(feedId, importId);
    await deps.objects.delete(keys.request);
    await deps.objects.delete(keys.file);
    return undefined;
  }
  await runFeedImports(deps, feedId);
  return deps.imports.get(feedId, importId);
}

/** The feed's lease is held by another runner or by the feed's deletion: the trigger is to be retried. */
export class ImportDeferred extends Error {
  override name = 'ImportDeferred';
}

/** Thrown by a progress save whose runner has lost the feed's lease (it stalled past FEED_LEASE_MS). */
class LeaseLost extends Error {}

async function runFeedImports(deps: IngestDeps, feedId: string): Promise<void> {
  const owner = randomUUID();
  const until = () => new Date(deps.clock.now().getTime() + FEED_LEASE_MS);
  const lease = () => deps.imports.takeLease(feedId, owner, until(), deps.clock.now());
  const renewLease = async () => {
    if (!(await deps.imports.renewLease(feedId, owner, until())))
      throw new LeaseLost('Another runner took over the imports of this feed.');
  };
  if (!(await lease())) throw new ImportDeferred(`The imports of feed ${feedId} are run elsewhere now.`);
  for (;;) {
    const ran = new Set<string>();
    try {
      for (;;) {
        // A paused runner starts no other import (local stop).
        deps.signal?.throwIfAborted();
        const next = (await deps.imports.listUnfinished(feedId))[0];
        if (!next) break;
        // runImport ends every import it runs (or throws): one still unfinished is not run twice here.
        if (ran.has(next.importId)) throw new Error(`Import ${next.importId} stayed unfinished.`);
        ran.add(next.importId);
        await runImport(deps, feedId, next.importId, renewLease);
      }
    } catch (error) {
      if (error instanceof LeaseLost) return;
      throw error;
    } finally {
      await deps.imports.releaseLease(feedId, owner);
    }
    if ((await deps.imports.listUnfinished(feedId)).length === 0) return;
    // Taken by another runner meanwhile: it runs what is left.
    if (!(await lease())) return;
  }
}
