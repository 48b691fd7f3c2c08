import {
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import type { Config } from '#lib/config.ts';
import { mapLimit } from '#lib/ingest/concurrency.ts';
import type { ObjectStore } from '#lib/ports.ts';

export function createS3Client(config: Pick<Config, 'region' | 's3Endpoint'>): S3Client {
  return new S3Client({
    region: config.region,
    ...(config.s3Endpoint
      ? {
          endpoint: config.s3Endpoint,
          forcePathStyle: true,
          credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
          // The local S3-protocol server stores aws-chunked framing verbatim unless checksums are off.
          requestChecksumCalculation: 'WHEN_REQUIRED',
          responseChecksumValidation: 'WHEN_REQUIRED',
        }
      : {}),
  });
}

/** S3's limit of keys per DeleteObjects call. */
const DELETE_BATCH = 1000;
/** DeleteObjects calls in flight: a feed's deletion removes one object per catalogue image. */
const DELETES_IN_FLIGHT = 4;

/** Objects in one S3 bucket (the local S3-protocol server in local mode). */
export class S3ObjectStore implements ObjectStore {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
  ) {}

  async put(key: string, body: Buffer | string, contentType = 'application/octet-stream'): Promise<void> {
    await this.s3.send(
      new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: body, ContentType: contentType }),
    );
  }

  async get(key: string): Promise<Buffer | undefined> {
    try {
      const out = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      if (!out.Body) return undefined;
      return Buffer.from(await out.Body.transformToByteArray());
    } catch (error) {
      if (error instanceof Error && (error.name === 'NoSuchKey' || error.name === 'NotFound'))
        return undefined;
      throw error;
    }
  }

  async delete(key: string): Promise<void> {
    await this.s3.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
  }

  async deleteMany(keys: readonly string[]): Promise<void> {
    const batches: string[][] = [];
    for (let i = 0; i < keys.length; i += DELETE_BATCH) batches.push(keys.slice(i, i + DELETE_BATCH));
    await mapLimit(batches, DELETES_IN_FLIGHT, async (batch) => {
      const out = await this.s3.send(
        new DeleteObjectsCommand({
          Bucket: this.bucket,
          Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true },
        }),
      );
      // A batch answers 200 even when some of its keys failed (AccessDenied, SlowDown): they are listed.
      const failed = out.Errors ?? [];
      if (failed.length > 0) {
        const first = failed[0]!;
        throw new Error(
          `Could not delete ${failed.length} of ${batch.length} objects (${first.Key}: ${first.Code} ${first.Message ?? ''}).`,
        );
      }
    });
  }

  async list(prefix: string): Promise<string[]> {
    const keys: string[] = [];
    for await (const page of this.listPages(prefix)) keys.push(...page);
    return keys;
  }

  async *listPages(prefix: string): AsyncIterable<string[]> {
    let token: string | undefined;
    do {
      const out = await this.s3.send(
        new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, ContinuationToken: token }),
      );
      yield (out.Contents ?? []).flatMap((object) => (object.Key ? [object.Key] : []));
      token = out.IsTruncated ? out.NextContinuationToken : undefined;
    } while (token);
  }
}
