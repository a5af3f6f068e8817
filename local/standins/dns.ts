import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import * as packet from 'dns-packet';

/**
 * A DNS server on loopback (UDP) for the worker's `dnsServers` setting: it answers A queries
 * from a fixed table, AAAA with no data, unknown names with NXDOMAIN, and on request fails a
 * name on the wire: `servfail` answers SERVFAIL (what getaddrinfo reports as EAI_AGAIN, c-ares
 * as ESERVFAIL), `drop` never answers (ETIMEOUT). It counts every query it received and how it
 * answered, so a test sees the resolver's traffic where it lands.
 *
 * The wire format is dns-packet's (a maintained encoder/decoder); the server is a few lines.
 */

export type DnsFault = 'servfail' | 'drop';

export interface DnsQueryLog {
  name: string;
  type: string;
  answered: 'address' | 'nodata' | 'nxdomain' | 'servfail' | 'dropped';
}

export class DnsStandin {
  readonly #socket: Socket;
  readonly #records: Map<string, string[]>;
  readonly #faults = new Map<string, DnsFault>();
  readonly #log: DnsQueryLog[] = [];

  private constructor(socket: Socket, records: Map<string, string[]>) {
    this.#socket = socket;
    this.#records = records;
    socket.on('message', (msg, rinfo) => this.#answer(msg, rinfo));
  }

  /** Starts on 127.0.0.1 at an ephemeral port; `records` maps names to IPv4 addresses. */
  static async start(records: Record<string, string[]>): Promise<DnsStandin> {
    const socket = createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(0, '127.0.0.1', () => {
        socket.off('error', reject);
        resolve();
      });
    });
    const table = new Map(Object.entries(records).map(([name, a]) => [name.toLowerCase(), a]));
    return new DnsStandin(socket, table);
  }

  /** `ip:port`, as the worker's DNS_SERVERS takes it. */
  get server(): string {
    const { address, port } = this.#socket.address();
    return `${address}:${port}`;
  }

  /** Fails every query for `name` this way until cleared (undefined). */
  setFault(name: string, fault: DnsFault | undefined): void {
    if (fault) this.#faults.set(name.toLowerCase(), fault);
    else this.#faults.delete(name.toLowerCase());
  }

  /** Every query received, in order. */
  queries(name?: string): DnsQueryLog[] {
    return name ? this.#log.filter((q) => q.name === name.toLowerCase()) : [...this.#log];
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.#socket.close(() => resolve()));
  }

  #answer(msg: Buffer, rinfo: RemoteInfo): void {
    let query: packet.Packet;
    try {
      query = packet.decode(msg);
    } catch {
      return; // Not DNS: nothing to answer.
    }
    const question = query.questions?.[0];
    if (!question) return;
    const name = question.name.toLowerCase();
    const fault = this.#faults.get(name);
    const entry: DnsQueryLog = { name, type: question.type, answered: 'dropped' };
    this.#log.push(entry);
    if (fault === 'drop') return;
    const addresses = this.#records.get(name);
    let rcode: 'NOERROR' | 'NXDOMAIN' | 'SERVFAIL' = 'NOERROR';
    let answers: packet.Answer[] = [];
    if (fault === 'servfail') {
      rcode = 'SERVFAIL';
      entry.answered = 'servfail';
    } else if (!addresses) {
      rcode = 'NXDOMAIN';
      entry.answered = 'nxdomain';
    } else if (question.type === 'A') {
      answers = addresses.map((data) => ({ type: 'A', name: question.name, ttl: 0, class: 'IN', data }));
      entry.answered = 'address';
    } else {
      entry.answered = 'nodata';
    }
    const reply = packet.encode({
      id: query.id,
      type: 'response',
      // QR is set by `type`; RD copied, RA set, and the rcode in the low bits.
      flags: packet.RECURSION_DESIRED | packet.RECURSION_AVAILABLE | RCODES[rcode],
      questions: [question],
      answers,
    });
    this.#socket.send(reply, rinfo.port, rinfo.address);
  }
}

const RCODES = { NOERROR: 0, SERVFAIL: 2, NXDOMAIN: 3 } as const;
