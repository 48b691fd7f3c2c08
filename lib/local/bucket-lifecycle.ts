import { readdir, rm, stat } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { S3RVER_OBJECT_SUFFIX } from '#lib/local/embedded-stores.ts';
import type { ObjectStore } from '#lib/ports.ts';

const DAY_MS = 86_400_000;
/** As the assets bucket's lifecycle rules in AWS (infra/stacks/stateful-stack.ts): parts of an upload… */
export const INCOMPLETE_UPLOAD_MAX_AGE_MS = DAY_MS;
/** …and feed files with their request markers (`imports/`). */
export const IMPORT_FILE_MAX_AGE_MS = 30 * DAY_MS;

/** Where s3rver keeps the parts of multipart uploads, one folder per upload. */
const UPLOADS_FOLDER = '._S3rver_uploads';
const IMPORTS_FOLDER = 'imports';

/**
 * The assets bucket's lifecycle rules for local mode, whose S3 server (s3rver) applies none. The parts of
 * a multipart upload go a day after its last part: s3rver refuses AbortMultipartUpload, so each feed
 * download stopped past its first 8 MB part (a size cap, a timeout, a stop, its feed deleted) kept its
 * parts (16.8 MB for one cut at 20 MB), listed nowhere, for ever. Objects under `imports/` (feed files and
 * their request markers, which nothing reads once their import has ended) go 30 days after they were
 * written, through the object store, so that s3rver's own files of each go with it; every import kept a
 * copy of its feed file. `bucketDir` is the bucket's folder in s3rver's directory. Returns how many
 * uploads and objects went; `signal` stops it between two.
 */
export async function sweepBucketLifecycle(options: {
  bucketDir: string;
  objects: ObjectStore;
  nowMs: number;
  signal?: AbortSignal;
}): Promise<number> {
  const { bucketDir, objects, nowMs, signal } = options;
  let removed = 0;
  const uploads = join(bucketDir, UPLOADS_FOLDER);
  for (const upload of await readdir(uploads, { withFileTypes: true }).catch(() => [])) {
    if (signal?.aborted) return removed;
    if (!upload.isDirectory()) continue;
    const folder = join(uploads, upload.name);
    const changed = await stat(folder).then(
      (s) => s.mtimeMs,
      () => nowMs,
    );
    if (nowMs - changed < INCOMPLETE_UPLOAD_MAX_AGE_MS) continue;
    await rm(folder, { recursive: true, force: true });
    removed += 1;
  }
  const imports = join(bucketDir, IMPORTS_FOLDER);
  const old: string[] = [];
  for (const entry of await readdir(imports, { recursive: true, withFileTypes: true }).catch(() => [])) {
    if (!entry.isFile() || !entry.name.endsWith(S3RVER_OBJECT_SUFFIX)) continue;
    const file = join(entry.parentPath, entry.name);
    const written = await stat(file).then(
      (s) => s.mtimeMs,
      () => nowMs,
    );
    if (nowMs - written >= IMPORT_FILE_MAX_AGE_MS)
      old.push(relative(bucketDir, file).slice(0, -S3RVER_OBJECT_SUFFIX.length).split(sep).join('/'));
  }
  for (let start = 0; start < old.length && !signal?.aborted; start += 1000) {
    const batch = old.slice(start, start + 1000);
    await objects.deleteMany(batch);
    removed += batch.length;
  }
  return removed;
}
