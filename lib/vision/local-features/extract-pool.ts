/**
 * ORB extraction on worker threads. OpenCV's wasm ORB is the longest step of an image search that runs on
 * the JS thread (~36 ms of a 640-px query), and at import it takes ~28 ms per item for both orientations;
 * on the JS thread it holds up everything else that thread does meanwhile: the k-NN and the regional
 * windows' post-processing of the same search, the next item's fetch and store writes of an import. On a
 * worker it runs beside them (measured: docs/benchmarks.md "ORB on a worker thread"; the times above are
 * bench:rerank's with keypoint recipe 2, docs/benchmarks.md "Keypoint recipe 2").
 *
 * A search also hands a worker half of a long shortlist's verification (`verify`): by then the query's
 * keypoints are extracted and the worker is idle, while verification is plain JS on the calling thread.
 *
 * The worker runs the same `extractLocalFeatures` on its own OpenCV instance (and its own wasm heap),
 * which it starts loading as soon as it starts. Its entry is TypeScript: this runs where the sources run
 * (local mode and the tools, through tsx's loader), or from a plain-JS bundle of that entry when given
 * one (local mode builds it at start, lib/local/worker-bundle.ts): tsx's loader also passes OpenCV's
 * 13 MB module through its hooks, and a worker booted through it took ~1.0–1.4 s to its first features
 * against ~0.8 s from the bundle. The Lambda bundles keep extraction on the JS thread
 * (`LOCAL_FEATURE_WORKERS` 0, lib/config.ts).
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { type ImageRefusal, InvalidImageError } from '#lib/domain/errors.ts';
import type { Box } from '#lib/vision/image-input.ts';
import type { FeatureRole } from '#lib/vision/local-features/extract.ts';
import type { ExtractRequest, VerifyRequest } from '#lib/vision/local-features/extract-worker.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';

type Reply =
  | { id: number; features: LocalFeatures }
  | { id: number; inliers: number[] }
  | { id: number; error: WorkerError };

interface Pending {
  worker: number;
  resolve: (answer: LocalFeatures | number[]) => void;
  reject: (error: Error) => void;
}

const ENTRY = new URL('./extract-worker.ts', import.meta.url);

/** The worker's bootstrap: tsx's ESM loader first (the entry and its `#lib` imports are TypeScript). */
function bootstrap(): string {
  return `import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(ENTRY.href)}); });`;
}

/** Crashes in a row, without a single answer in between, after which a worker is not started again. */
const MAX_CRASHES_IN_A_ROW = 3;

export class ExtractionPool {
  private readonly workers: Worker[] = [];
  /** Per worker: crashes since its last answer (an entry that cannot load crashes at every start). */
  private readonly crashes: number[] = [];
  /** Set once a worker keeps crashing: every extraction then fails at once instead of respawning forever. */
  private broken: Error | undefined;
  private readonly entry: string | undefined;
  private readonly pending = new Map<number, Pending>();
  /** Requests in flight per worker: each image goes to the least busy one. */
  private readonly load: number[] = [];
  private nextId = 0;
  private closed = false;

  /**
   * @param entry a plain-JS bundle of extract-worker.ts to run (a file path); without it, the TypeScript
   *   entry through tsx's loader
   * @throws Error when the entry is missing (a bundle without the sources, or a bundled entry deleted)
   */
  constructor(size: number, entry?: string) {
    // Absolute: a Worker takes a relative path as relative to nothing it can resolve (ERR_WORKER_PATH).
    this.entry = entry === undefined ? undefined : resolve(entry);
    if (this.entry !== undefined && !existsSync(this.entry))
      throw new Error(`the extraction worker bundle ${entry} does not exist`);
    if (entry === undefined && !existsSync(fileURLToPath(ENTRY)))
      throw new Error(
        `LOCAL_FEATURE_WORKERS needs ${fileURLToPath(ENTRY)} (the TypeScript sources); set it to 0 in bundles`,
      );
    for (let i = 0; i < size; i += 1) this.workers.push(this.spawn(i));
  }

  extract(image: Buffer, role: FeatureRole, region?: Box): Promise<LocalFeatures> {
    // A copy: the caller keeps its buffer (the import stores the image, the search embeds it).
    const copy = new Uint8Array(image);
    return this.send<LocalFeatures>(
      (id): ExtractRequest => ({ id, image: copy, role, ...(region ? { region } : {}) }),
      [copy.buffer as ArrayBuffer],
    );
  }

  /**
   * Inliers of each candidate against the query (verifyCandidates) on a worker. The features are copied,
   * not transferred: they are the caller's (its feature cache's) to keep.
   */
  verify(query: LocalFeatures, candidates: readonly (LocalFeatures | undefined)[]): Promise<number[]> {
    return this.send<number[]>((id): VerifyRequest => ({ id, query, candidates: [...candidates] }), []);
  }

  /** Whether some worker has nothing in flight (and the pool can take work). */
  hasIdleWorker(): boolean {
    return !this.closed && !this.broken && this.load.some((requests) => requests === 0);
  }

  /** Sends a request to the least busy worker; its answer settles the promise. */
  private send<T extends LocalFeatures | number[]>(
    request: (id: number) => ExtractRequest | VerifyRequest,
    transfer: ArrayBuffer[],
  ): Promise<T> {
    if (this.closed) return Promise.reject(new Error('the extraction pool is closed'));
    if (this.broken) return Promise.reject(this.broken);
    const index = this.load.indexOf(Math.min(...this.load));
    const id = this.nextId++;
    const worker = this.workers[index]!;
    // A worker with work in flight keeps the process alive until it answers; an idle one does not.
    if (this.load[index] === 0) worker.ref();
    this.load[index] = this.load[index]! + 1;
    const settled = () => {
      this.load[index] = this.load[index]! - 1;
      if (this.load[index] === 0) worker.unref();
    };
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, {
        worker: index,
        resolve: (answer) => {
          settled();
          resolve(answer as T);
        },
        reject: (error) => {
          settled();
          reject(error);
        },
      });
      try {
        worker.postMessage(request(id), transfer);
      } catch (error) {
        // Not sent (a buffer that cannot be cloned, say): nothing will answer it.
        this.pending.delete(id);
        settled();
        reject(error as Error);
      }
    });
  }

  /** Stops the workers; extractions still in flight are rejected. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.workers.map((worker) => worker.terminate()));
    this.fail(new Error('the extraction pool was closed'));
  }

  private spawn(index: number): Worker {
    const worker = this.entry ? new Worker(this.entry) : new Worker(bootstrap(), { eval: true });
    this.load[index] = 0;
    this.crashes[index] ??= 0;
    worker.on('message', (reply: Reply) => {
      // A reply a replaced worker sent before it stopped: its request was failed already.
      if (this.workers[index] !== worker) return;
      this.crashes[index] = 0;
      const waiting = this.pending.get(reply.id);
      if (!waiting) return;
      this.pending.delete(reply.id);
      if ('features' in reply) waiting.resolve(reply.features);
      else if ('inliers' in reply) waiting.resolve(reply.inliers);
      else waiting.reject(reviveError(reply.error));
    });
    // A worker that stops fails what it was given, and a fresh one takes its place: after an uncaught
    // error ('error', then 'exit', which then finds it replaced) or when it exits on its own ('exit'
    // alone: process.exit in the worker), which would otherwise leave its requests waiting forever.
    worker.on('error', (error) => this.stopped(index, worker, error));
    // A reply that cannot be read names no request: the worker's are failed and it is replaced.
    worker.on('messageerror', (error) => {
      this.stopped(index, worker, error);
      void worker.terminate();
    });
    worker.on('exit', (code) =>
      this.stopped(index, worker, new Error(`the extraction worker exited with code ${code}`)),
    );
    // Idle, it must not keep a finished process (a CLI, a test) alive; unref after the listeners, which
    // would take the reference again.
    worker.unref();
    return worker;
  }

  /**
   * Worker `index` stopped: its requests fail with `error`, and it is started again unless it keeps
   * stopping without answering anything (its entry cannot load): then the pool stops.
   */
  private stopped(index: number, worker: Worker, error: Error): void {
    if (this.closed || this.broken || this.workers[index] !== worker) return;
    this.fail(error, index);
    this.crashes[index] = this.crashes[index]! + 1;
    if (this.crashes[index]! >= MAX_CRASHES_IN_A_ROW) {
      this.broken = new Error(
        `the extraction worker crashed ${this.crashes[index]} times in a row: ${error.message}`,
      );
      this.fail(this.broken);
      return;
    }
    try {
      this.workers[index] = this.spawn(index);
    } catch (spawnError) {
      this.broken = new Error(
        `the extraction worker cannot be started again: ${(spawnError as Error).message}`,
      );
      this.fail(this.broken);
    }
  }

  /** Rejects the extractions in flight (on one worker, or on all). */
  private fail(error: Error, worker?: number): void {
    for (const [id, waiting] of this.pending) {
      if (worker !== undefined && waiting.worker !== worker) continue;
      this.pending.delete(id);
      waiting.reject(error);
    }
  }
}

/** An error as a worker sends it: a refused image's refusal with it. */
interface WorkerError {
  name: string;
  message: string;
  refusal?: ImageRefusal;
}

/** Undecodable images stay `InvalidImageError` (a 4xx) across the thread boundary. */
function reviveError({ name, message, refusal }: WorkerError): Error {
  if (refusal) return new InvalidImageError(refusal);
  return Object.assign(new Error(message), { name });
}
