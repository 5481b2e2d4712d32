// What the browser's data modules may use beyond ECMAScript: what both browsers and node
// (which runs the tests) provide. tsconfig.json leaves the DOM library out, so a data
// module that reaches for the document, the window or an element does not type-check.

declare class URLSearchParams {
  constructor(init?: string | Record<string, string>);
  get(name: string): string | null;
  set(name: string, value: string): void;
  has(name: string): boolean;
  append(name: string, value: string): void;
  delete(name: string): void;
  toString(): string;
}

declare function setTimeout(handler: () => void, ms?: number): unknown;
declare function clearTimeout(id: unknown): void;

// The browser's defaults of what socket.js and store.js take injected (node tests inject
// their own): the modules only pass them on.
declare var WebSocket: unknown;
declare function requestAnimationFrame(callback: (time: number) => void): number;
