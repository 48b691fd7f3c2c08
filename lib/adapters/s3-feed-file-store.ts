import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  PutObjectCommand,
  type S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import type { FeedFileStore } from '#lib/ports.ts';

/** S3 multipart parts must be at least 5 MiB (but the last). */
const PART_BYTES = 8 * 1024 * 1024;

/**
 * Feed files in the assets bucket, streamed: a file is uploaded in 8 MiB multipart parts (one plain PUT
 * when it is smaller) and read back as the response stream, so memory stays at one part whatever the size.
 */
export class S3FeedFileStore implements FeedFileStore {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
  ) {}

  async write(key: string, body: AsyncIterable<Uint8Array>, contentType: string): Promise<number> {
    let buffered: Buffer[] = [];
    let bufferedBytes = 0;
    let total = 0;
    let uploadId: string | undefined;
    const parts: { ETag: string | undefined; PartNumber: number }[] = [];
    const flushPart = async () => {
      uploadId ??= (
        await this.s3.send(
          new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: key, ContentType: contentType }),
        )
      ).UploadId;
      const part = Buffer.concat(buffered);
      buffered = [];
      bufferedBytes = 0;
      const PartNumber = parts.length + 1;
      const out = await this.s3.send(
        new UploadPartCommand({
          Bucket: this.bucket,
          Key: key,
          UploadId: uploadId,
          PartNumber,
          Body: part,
          ContentLength: part.length,
        }),
      );
      parts.push({ ETag: out.ETag, PartNumber });
    };
    try {
      for await (const chunk of body) {
        buffered.push(Buffer.from(chunk));
        bufferedBytes += chunk.length;
        total += chunk.length;
        if (bufferedBytes >= PART_BYTES) await flushPart();
      }
      if (uploadId === undefined) {
        await this.s3.send(
          new PutObjectCommand({
            Bucket: this.bucket,
            Key: key,
            Body: Buffer.concat(buffered),
            ContentType: contentType,
          }),
        );
        return total;
      }
      if (bufferedBytes > 0) await flushPart();
      await this.s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: this.bucket,
          Key: key,
          UploadId: uploadId,
          MultipartUpload: { Parts: parts },
        }),
      );
      return total;
    } catch (error) {
      if (uploadId !== undefined) {
        await this.s3
          .send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId }))
          .catch(() => undefined);
      }
      throw error;
    }
  }

  async read(key: string): Promise<AsyncIterable<Uint8Array> | undefined> {
    try {
      const out = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      return out.Body as AsyncIterable<Uint8Array> | undefined;
    } catch (error) {
      if (error instanceof Error && (error.name === 'NoSuchKey' || error.name === 'NotFound'))
        return undefined;
      throw error;
    }
  }
}
