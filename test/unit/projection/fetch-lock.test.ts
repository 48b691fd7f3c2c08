/**
 * The training packages' fetch lock (layers/projection/fetch.ts): the re-training and calibration tests
 * run in parallel processes and both unpack the same packages, so one must wait for the other. Checked
 * with real processes: each holds the lock for a while and records when it entered and left.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { withFetchLock } from '#layers/projection/fetch.ts';

const fetchModule = join(import.meta.dirname, '../../../layers/projection/fetch.ts');

/** A child process that takes the lock, holds it `holdMs`, and appends "start end" to `log`. */
function holder(dir: string, log: string, holdMs: number): Promise<number | null> {
  const script = `
    import { appendFileSync } from 'node:fs';
    import { withFetchLock } from ${JSON.stringify(fetchModule)};
    withFetchLock(${JSON.stringify(dir)}, () => {
      const start = Date.now();
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ${holdMs});
      appendFileSync(${JSON.stringify(log)}, start + ' ' + Date.now() + '\\n');
    });`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return new Promise((resolve) => child.on('exit', resolve));
}

describe('training data fetch lock', () => {
  it('lets one process at a time in', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fetch-lock-'));
    const log = join(dir, 'log');
    const codes = await Promise.all([holder(dir, log, 400), holder(dir, log, 400), holder(dir, log, 400)]);
    expect(codes).toEqual([0, 0, 0]);
    const spans = readFileSync(log, 'utf8')
      .trim()
      .split('\n')
      .map((line) => line.split(' ').map(Number) as [number, number])
      .sort((a, b) => a[0] - b[0]);
    expect(spans).toHaveLength(3);
    for (let i = 1; i < spans.length; i += 1) expect(spans[i]![0]).toBeGreaterThanOrEqual(spans[i - 1]![1]);
    expect(existsSync(join(dir, '.fetch.lock'))).toBe(false);
  }, 30_000);

  it('takes over a lock whose holder has died', () => {
    const dir = mkdtempSync(join(tmpdir(), 'fetch-lock-'));
    mkdirSync(join(dir, '.fetch.lock'));
    // No process has this pid: pid_max is at most 2^22 on Linux.
    writeFileSync(join(dir, '.fetch.lock', 'pid'), `${2 ** 22 + 1}\n`);
    let ran = false;
    withFetchLock(dir, () => {
      ran = true;
    });
    expect(ran).toBe(true);
    expect(existsSync(join(dir, '.fetch.lock'))).toBe(false);
  });

  it('releases the lock when the work throws', () => {
    const dir = mkdtempSync(join(tmpdir(), 'fetch-lock-'));
    expect(() =>
      withFetchLock(dir, () => {
        throw new Error('apt-get download failed');
      }),
    ).toThrow('apt-get download failed');
    expect(existsSync(join(dir, '.fetch.lock'))).toBe(false);
  });
});
