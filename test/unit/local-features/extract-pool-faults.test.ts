/**
 * Fault injection for ExtractionPool (lib/vision/local-features/extract-pool.ts): the two ways a worker
 * can be lost that a real worker cannot be made to show on demand — a reply the parent cannot
 * deserialise ('messageerror') and a replacement worker that cannot be constructed. `node:worker_threads`
 * is mocked with a scripted worker; test/integration/local-features/extract-pool.test.ts runs real ones.
 */
import { EventEmitter } from 'node:events';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';

/** A worker the test drives: it records what it is sent and answers only when told to. */
class ScriptedWorker extends EventEmitter {
  static created: ScriptedWorker[] = [];
  /** When set, the next construction throws it (a worker that cannot be started). */
  static failNext: Error | undefined;
  readonly received: { id: number }[] = [];
  terminated = false;

  constructor() {
    super();
    if (ScriptedWorker.failNext) {
      const error = ScriptedWorker.failNext;
      ScriptedWorker.failNext = undefined;
      throw error;
    }
    ScriptedWorker.created.push(this);
  }

  postMessage(request: { id: number }): void {
    this.received.push(request);
  }

  answer(inliers: number[]): void {
    this.emit('message', { id: this.received.at(-1)!.id, inliers });
  }

  ref(): void {}
  unref(): void {}

  terminate(): Promise<number> {
    this.terminated = true;
    return Promise.resolve(1);
  }
}

vi.mock('node:worker_threads', () => ({ Worker: ScriptedWorker }));

const { ExtractionPool } = await import('#lib/vision/local-features/extract-pool.ts');

/** Any existing file: the pool only checks that its entry is there before giving it to Worker. */
const ENTRY = import.meta.filename;
const QUERY = {} as LocalFeatures;

afterEach(() => {
  ScriptedWorker.created = [];
  ScriptedWorker.failNext = undefined;
});

describe('ExtractionPool when a worker is lost', () => {
  it('fails the requests of a worker whose reply cannot be read, stops it and answers from a fresh one', async () => {
    // Prepare
    const pool = new ExtractionPool(1, ENTRY);
    const [first] = ScriptedWorker.created;
    const pending = pool.verify(QUERY, []);
    // Act: the parent cannot deserialise the worker's reply
    first!.emit('messageerror', new Error('could not deserialize'));
    // Assess: the request fails with that error, the worker is stopped and replaced
    await expect(pending).rejects.toThrow('could not deserialize');
    expect(first!.terminated).toBe(true);
    expect(ScriptedWorker.created).toHaveLength(2);
    const next = pool.verify(QUERY, []);
    const replacement = ScriptedWorker.created[1]!;
    // A late reply of the stopped worker names the new request's id, and must not answer it
    first!.emit('message', { id: replacement.received[0]!.id, inliers: [1] });
    replacement.answer([7]);
    await expect(next).resolves.toEqual([7]);
    expect(pool.hasIdleWorker()).toBe(true);
    await pool.close();
  });

  it('fails every request at once when a stopped worker cannot be started again', async () => {
    // Prepare
    const pool = new ExtractionPool(1, ENTRY);
    const pending = pool.verify(QUERY, []);
    ScriptedWorker.failNext = new Error('ERR_WORKER_INIT_FAILED');
    // Act: the worker exits; starting its replacement throws
    ScriptedWorker.created[0]!.emit('exit', 1);
    // Assess: its request fails with the exit, and the pool refuses work from then on instead of throwing
    // from the event handler
    await expect(pending).rejects.toThrow('the extraction worker exited with code 1');
    await expect(pool.verify(QUERY, [])).rejects.toThrow(
      'the extraction worker cannot be started again: ERR_WORKER_INIT_FAILED',
    );
    expect(pool.hasIdleWorker()).toBe(false);
    expect(ScriptedWorker.created).toHaveLength(1);
    await pool.close();
  });
});
