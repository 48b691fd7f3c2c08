/**
 * Fetches pinned Debian packages (`apt-get download NAME=VERSION`, no root needed) and unpacks them with
 * `dpkg -x`, once each (a marker file per package). A fresh machine may have no package index yet: when a
 * download fails, the index is refreshed once (`apt-get update`, which needs root, as on CI) and the
 * download retried. Kept apart from data.ts because it does not decide which images are trained on.
 *
 * Several processes may ask at once (the re-training and the calibration tests run in parallel vitest
 * workers): a lock directory makes one of them fetch while the others wait, so nobody reads a package
 * another is still unpacking over it.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { processAlive } from '#lib/local/process-alive.ts';

export interface PinnedPackage {
  name: string;
  version: string;
}

let indexRefreshed = false;

function download(name: string, version: string, directory: string): void {
  execFileSync('apt-get', ['download', `${name}=${version}`], {
    cwd: directory,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

/** Longest wait for another process's fetch: four packages, ~240 MB, on a slow mirror. */
const LOCK_TIMEOUT_MS = 15 * 60_000;
const LOCK_POLL_MS = 250;

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** The holder's pid is gone, or it never wrote one (died between mkdir and write) a while ago. */
function isStale(lock: string, owner: string): boolean {
  try {
    const holder = Number(readFileSync(owner, 'utf8'));
    return Number.isInteger(holder) && holder > 0 && !processAlive(holder);
  } catch {
    try {
      return Date.now() - statSync(lock).mtimeMs > 10_000;
    } catch {
      return false; // released meanwhile: the next mkdir will tell
    }
  }
}

/**
 * Runs `work` holding `<dataDir>/.fetch.lock` (mkdir is atomic). A lock whose holder has died (its pid,
 * written inside, is gone) is taken over.
 */
export function withFetchLock(dataDir: string, work: () => void): void {
  const lock = join(dataDir, '.fetch.lock');
  const owner = join(lock, 'pid');
  const deadline = Date.now() + LOCK_TIMEOUT_MS;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(owner, `${process.pid}\n`);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    if (isStale(lock, owner)) {
      rmSync(lock, { recursive: true, force: true });
      continue;
    }
    if (Date.now() > deadline)
      throw new Error(
        `train-data: still locked by another fetch after ${LOCK_TIMEOUT_MS / 60_000} min: ${lock}`,
      );
    sleepSync(LOCK_POLL_MS);
  }
  try {
    work();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** Downloads into `<dataDir>/debs` and unpacks into `root` every package not unpacked yet. */
export function ensurePackages(packages: readonly PinnedPackage[], dataDir: string, root: string): void {
  const marker = ({ name, version }: PinnedPackage) =>
    join(dataDir, `${name}_${version.replace(':', '%3a')}.unpacked`);
  // Unpacked already (every later call in a process, every run after the first): no lock needed.
  if (packages.every((pkg) => existsSync(marker(pkg)))) return;
  mkdirSync(dataDir, { recursive: true });
  withFetchLock(dataDir, () => fetchMissing(packages, dataDir, root, marker));
}

function fetchMissing(
  packages: readonly PinnedPackage[],
  dataDir: string,
  root: string,
  markerOf: (pkg: PinnedPackage) => string,
): void {
  const debs = join(dataDir, 'debs');
  mkdirSync(debs, { recursive: true });
  mkdirSync(root, { recursive: true });
  for (const { name, version } of packages) {
    const fileVersion = version.replace(':', '%3a');
    const marker = markerOf({ name, version });
    if (existsSync(marker)) continue;
    const debName = `${name}_${fileVersion}_all.deb`;
    if (!readdirSync(debs).includes(debName)) {
      console.error(`train-data: apt-get download ${name}=${version}`);
      try {
        download(name, version, debs);
      } catch {
        if (indexRefreshed) throw new Error(`apt-get download ${name}=${version} failed`);
        console.error('train-data: apt-get update (the package index may be missing or stale)');
        try {
          execFileSync('apt-get', ['update', '-qq'], { stdio: ['ignore', 'ignore', 'inherit'] });
        } catch {
          throw new Error(
            `apt-get download ${name}=${version} failed; run \`apt-get update\` once and retry.`,
          );
        }
        indexRefreshed = true;
        download(name, version, debs);
      }
    }
    execFileSync('dpkg', ['-x', join(debs, debName), root], { stdio: 'inherit' });
    writeFileSync(marker, `${new Date().toISOString()}\n`);
  }
}
