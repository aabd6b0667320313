/**
 * @module bench/lib/machine
 * How busy the shared machine was while a case ran, to tell a disturbed run from a slow one:
 * the cores busy (all processes, from /proc/stat), the cores this bench's case process used
 * (its children's CPU, from /proc/self/stat), and the kernel's pressure stall figures (the share
 * of the time some task waited for a CPU, or stalled on I/O: /proc/pressure). Linux only; on
 * other systems the figures are NaN.
 */
import { readFileSync } from 'node:fs';

interface Sample {
  at: number;
  busy: number;
  children: number;
  cpuSomeUs: number;
  ioSomeUs: number;
}

export interface MachineLoad {
  /** Cores busy, all processes together. */
  busyCores: number;
  /** Cores used by the case's own process (PostgreSQL's backends not included). */
  caseCores: number;
  /** Share of the time some runnable task waited for a CPU. */
  cpuPressure: number;
  /** Share of the time some task stalled on I/O. */
  ioPressure: number;
}

const TICKS = 100;

function read(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

function someTotal(text: string): number {
  const m = /^some .*total=(\d+)/m.exec(text);
  return m ? Number(m[1]) : Number.NaN;
}

export function sample(): Sample {
  const cpu = read('/proc/stat').split('\n')[0]?.trim().split(/\s+/).slice(1).map(Number) ?? [];
  // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
  const busy = cpu.length >= 8 ? cpu[0]! + cpu[1]! + cpu[2]! + cpu[5]! + cpu[6]! + cpu[7]! : Number.NaN;
  const self = read('/proc/self/stat');
  const fields = self.slice(self.lastIndexOf(')') + 2).split(' ');
  // cutime and cstime: fields 16 and 17 of the line, 14 and 15 after the command name.
  const children = Number(fields[13]) + Number(fields[14]);
  return {
    at: performance.now(),
    busy,
    children,
    cpuSomeUs: someTotal(read('/proc/pressure/cpu')),
    ioSomeUs: someTotal(read('/proc/pressure/io')),
  };
}

export function loadBetween(a: Sample, b: Sample): MachineLoad {
  const seconds = (b.at - a.at) / 1000;
  return {
    busyCores: (b.busy - a.busy) / TICKS / seconds,
    caseCores: (b.children - a.children) / TICKS / seconds,
    cpuPressure: (b.cpuSomeUs - a.cpuSomeUs) / 1e6 / seconds,
    ioPressure: (b.ioSomeUs - a.ioSomeUs) / 1e6 / seconds,
  };
}

export const describeLoad = (l: MachineLoad) =>
  `machine ${l.busyCores.toFixed(2)} cores busy (case process ${l.caseCores.toFixed(2)}), ` +
  `CPU pressure ${(l.cpuPressure * 100).toFixed(0)}%, I/O pressure ${(l.ioPressure * 100).toFixed(0)}%`;
