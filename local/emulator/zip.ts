import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { crc32, deflateRawSync, inflateRawSync } from 'node:zlib';

/**
 * Just enough ZIP for the local runtime: read the archives the CDK uploads as Lambda code
 * (stored or deflated entries, no ZIP64, no encryption) and write small ones for tests.
 */
export interface ZipEntry {
  name: string;
  data: Buffer;
  /** Unix mode from the external attributes (0 when the archive was not made on Unix). */
  mode?: number;
}

const EOCD_SIGNATURE = 0x06054b50;
const CENTRAL_SIGNATURE = 0x02014b50;
const LOCAL_SIGNATURE = 0x04034b50;

export class ZipFormatError extends Error {
  override name = 'ZipFormatError';
}

/** Every file entry of a ZIP archive (directories are left out). */
export function readZip(zip: Buffer): ZipEntry[] {
  // The end-of-central-directory record sits in the last 22 bytes plus an optional comment (< 64 KiB).
  let eocd = -1;
  for (let i = zip.length - 22; i >= Math.max(0, zip.length - 22 - 0xffff); i--) {
    if (zip.readUInt32LE(i) === EOCD_SIGNATURE) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new ZipFormatError('not a ZIP archive (no end-of-central-directory record)');
  const count = zip.readUInt16LE(eocd + 10);
  let offset = zip.readUInt32LE(eocd + 16);
  const entries: ZipEntry[] = [];
  for (let n = 0; n < count; n++) {
    if (zip.readUInt32LE(offset) !== CENTRAL_SIGNATURE) throw new ZipFormatError('corrupt central directory');
    const method = zip.readUInt16LE(offset + 10);
    const compressedSize = zip.readUInt32LE(offset + 20);
    const madeOnUnix = zip.readUInt8(offset + 5) === 3;
    const mode = madeOnUnix ? zip.readUInt32LE(offset + 38) >>> 16 : 0;
    const nameLength = zip.readUInt16LE(offset + 28);
    const extraLength = zip.readUInt16LE(offset + 30);
    const commentLength = zip.readUInt16LE(offset + 32);
    const localOffset = zip.readUInt32LE(offset + 42);
    const name = zip.toString('utf8', offset + 46, offset + 46 + nameLength);
    offset += 46 + nameLength + extraLength + commentLength;
    if (name.endsWith('/')) continue;
    if (zip.readUInt32LE(localOffset) !== LOCAL_SIGNATURE) throw new ZipFormatError(`corrupt entry ${name}`);
    const dataStart =
      localOffset + 30 + zip.readUInt16LE(localOffset + 26) + zip.readUInt16LE(localOffset + 28);
    const raw = zip.subarray(dataStart, dataStart + compressedSize);
    if (method === 0) entries.push({ name, data: Buffer.from(raw), mode });
    else if (method === 8) entries.push({ name, data: inflateRawSync(raw), mode });
    else throw new ZipFormatError(`entry ${name} uses unsupported compression method ${method}`);
  }
  return entries;
}

/** A deflated ZIP archive of the given entries. */
export function writeZip(entries: ZipEntry[]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const entry of entries) {
    const name = Buffer.from(entry.name, 'utf8');
    const compressed = deflateRawSync(entry.data);
    const crc = crc32(entry.data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(LOCAL_SIGNATURE, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(8, 8);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(compressed.length, 18);
    local.writeUInt32LE(entry.data.length, 22);
    local.writeUInt16LE(name.length, 26);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(CENTRAL_SIGNATURE, 0);
    central.writeUInt16LE(0x0314, 4); // version made by: 3 = Unix, so the mode below counts
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(8, 10);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(compressed.length, 20);
    central.writeUInt32LE(entry.data.length, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt32LE((entry.mode ?? 0o100644) * 0x10000, 38);
    central.writeUInt32LE(offset, 42);
    locals.push(local, name, compressed);
    centrals.push(central, name);
    offset += local.length + name.length + compressed.length;
  }
  const centralSize = centrals.reduce((sum, b) => sum + b.length, 0);
  const eocd = Buffer.alloc(22);
  eocd.writeUInt32LE(EOCD_SIGNATURE, 0);
  eocd.writeUInt16LE(entries.length, 8);
  eocd.writeUInt16LE(entries.length, 10);
  eocd.writeUInt32LE(centralSize, 12);
  eocd.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, ...centrals, eocd]);
}

const S_IFMT = 0o170000;
const S_IFREG = 0o100000;

/**
 * Unpacks `zip` into `folder`, refusing every entry that would land outside it: a `..`
 * segment, an absolute path (`/x`, `\\x`, `C:x`), a backslash or NUL in the name, and any entry
 * that is not a plain file (a symlink entry could point anywhere, and a later entry written
 * through it would follow). Nothing is written when an entry is refused. Returns the paths written.
 */
export function extractZip(zip: Buffer, folder: string): string[] {
  const root = resolve(folder);
  const planned = readZip(zip).map((entry) => {
    const name = entry.name;
    const refuse = (why: string) => new ZipFormatError(`zip entry ${JSON.stringify(name)} refused: ${why}`);
    if (name.includes('\0')) throw refuse('NUL in the name');
    if (name.includes('\\')) throw refuse('backslash in the name');
    if (name.startsWith('/') || isAbsolute(name) || /^[A-Za-z]:/.test(name)) throw refuse('absolute path');
    if (name.split('/').some((part) => part === '..')) throw refuse('".." in the path');
    const type = (entry.mode ?? 0) & S_IFMT;
    if (type !== 0 && type !== S_IFREG)
      throw refuse(type === 0o120000 ? 'symbolic link' : 'not a regular file');
    const target = resolve(join(root, name));
    const rel = relative(root, target);
    // Belt and braces after the checks above: the resolved path must sit strictly inside the folder.
    if (rel === '' || rel.startsWith(`..${sep}`) || rel === '..' || isAbsolute(rel))
      throw refuse('outside the folder');
    return { target, data: entry.data };
  });
  for (const { target, data } of planned) {
    mkdirSync(dirname(target), { recursive: true });
    // wx: never write through something already there (a file or link from an earlier entry).
    writeFileSync(target, data, { flag: 'wx' });
  }
  return planned.map((p) => p.target);
}
