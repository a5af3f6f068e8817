import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { GetObjectCommand, ListBucketsCommand, type S3Client } from '@aws-sdk/client-s3';
import { extractZip } from '../emulator/zip.js';

export interface CodeCacheOptions {
  /** The emulator's S3, where `cdk deploy` uploaded the bundles. */
  s3: S3Client;
  /** Unzipped code per CodeSha256 is kept here. */
  cacheRoot: string;
  /** Use this directory as a function's code instead of fetching its zip (keyed by function name). */
  overrides?: Record<string, string>;
}

/** The functions' unzipped bundles, one folder per CodeSha256, fetched once per runtime. */
export class CodeCache {
  private readonly dirs = new Map<string, Promise<string>>();

  constructor(private readonly options: CodeCacheOptions) {}

  /** The function's unzipped code: an override, else the zip `cdk deploy` uploaded to the emulator's S3. */
  dirFor(functionName: string, codeSha: string, location: string | undefined): Promise<string> {
    const override = this.options.overrides?.[functionName];
    if (override) return Promise.resolve(override);
    const key = `${codeSha}|${location ?? ''}`;
    let dir = this.dirs.get(key);
    if (!dir) {
      dir = this.fetchCode(codeSha, location);
      this.dirs.set(key, dir);
      dir.catch(() => this.dirs.delete(key));
    }
    return dir;
  }

  private async fetchCode(codeSha: string, location: string | undefined): Promise<string> {
    const cacheRoot = this.options.cacheRoot;
    const dir = join(cacheRoot, codeSha.replace(/[^A-Za-z0-9]/g, '_') || randomUUID());
    if (existsSync(join(dir, '.complete'))) return dir;
    const objectKey = location ? decodeURIComponent(new URL(location).pathname.replace(/^\/+/, '')) : '';
    if (!objectKey) throw new Error(`no code location for ${codeSha}`);
    const buckets = (await this.options.s3.send(new ListBucketsCommand({}))).Buckets ?? [];
    // cdk deploy puts assets in the bootstrap bucket (cdk-<qualifier>-assets-<account>-<region>); look there first.
    buckets.sort((a, b) => Number(b.Name?.includes('-assets-')) - Number(a.Name?.includes('-assets-')));
    let zip: Buffer | undefined;
    for (const bucket of buckets) {
      try {
        const obj = await this.options.s3.send(new GetObjectCommand({ Bucket: bucket.Name, Key: objectKey }));
        zip = Buffer.from(await obj.Body!.transformToByteArray());
        break;
      } catch (err) {
        if ((err as { name?: string }).name !== 'NoSuchKey') throw err;
      }
    }
    if (!zip) throw new Error(`code object ${objectKey} not found in the emulator's S3 buckets`);
    const staging = `${dir}.${process.pid}.${randomUUID().slice(0, 8)}`;
    mkdirSync(staging, { recursive: true });
    try {
      extractZip(zip, staging);
    } catch (err) {
      rmSync(staging, { recursive: true, force: true });
      throw err;
    }
    // Lambda loads a `.js` handler without a package.json above it as CommonJS. The cache may sit
    // inside an ESM package (this repository is one), so say what Lambda would assume.
    if (!existsSync(join(staging, 'package.json'))) {
      writeFileSync(join(staging, 'package.json'), '{"type":"commonjs"}\n');
    }
    writeFileSync(join(staging, '.complete'), '');
    try {
      mkdirSync(dirname(dir), { recursive: true });
      renameSync(staging, dir);
    } catch {
      // Another runtime unpacked the same code first; use theirs.
      rmSync(staging, { recursive: true, force: true });
    }
    return dir;
  }
}
