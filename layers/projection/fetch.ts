/**
 * Fetches pinned Debian packages (`apt-get download NAME=VERSION`, no root needed) and unpacks them with
 * `dpkg -x`, once each (a marker file per package). A fresh machine may have no package index yet: when a
 * download fails, the index is refreshed once (`apt-get update`, which needs root, as on CI) and the
 * download retried. Kept apart from data.ts because it does not decide which images are trained on.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

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

/** Downloads into `<dataDir>/debs` and unpacks into `root` every package not unpacked yet. */
export function ensurePackages(packages: readonly PinnedPackage[], dataDir: string, root: string): void {
  const debs = join(dataDir, 'debs');
  mkdirSync(debs, { recursive: true });
  mkdirSync(root, { recursive: true });
  for (const { name, version } of packages) {
    const fileVersion = version.replace(':', '%3a');
    const marker = join(dataDir, `${name}_${fileVersion}.unpacked`);
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
