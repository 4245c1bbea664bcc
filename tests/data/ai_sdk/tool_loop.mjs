// The AI SDK (ai 7, @ai-sdk/openai 4) runs a tool loop through toolwire: its default OpenAI model (the
// Responses API, store unset = true), generateText or streamText, a `weather` tool and up to 3 steps.
// Settings come from the environment: BASE_URL, API_KEY, MODEL, MODE (generate | stream), PROMPT, and
// CONVERSATION (an id: the provider's `conversation` option). Prints one JSON line: the final text, the
// number of steps, the tool calls it ran and the request bodies it sent.
import { generateText, streamText, stepCountIs, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";

const sent = [];
const openai = createOpenAI({
  baseURL: process.env.BASE_URL,
  apiKey: process.env.API_KEY,
  fetch: async (url, init) => {
    if (init?.body) sent.push(JSON.parse(init.body));
    return fetch(url, init);
  },
});
const ran = [];
const weather = tool({
  description: "Get the weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    ran.push(city);
    return { city, forecast: "sunny", temperature: 21 };
  },
});
const args = {
  model: openai(process.env.MODEL ?? "qwen3"),
  tools: { weather },
  stopWhen: stepCountIs(3),
  prompt: process.env.PROMPT ?? "What is the weather in Oslo?",
  ...(process.env.CONVERSATION ? { providerOptions: { openai: { conversation: process.env.CONVERSATION } } } : {}),
};
let text, steps;
if (process.env.MODE === "stream") {
  const result = streamText({ ...args, onError: ({ error }) => { throw error; } });
  text = await result.text;
  steps = (await result.steps).length;
} else {
  const result = await generateText(args);
  text = result.text;
  steps = result.steps.length;
}
console.log(JSON.stringify({ text, steps, ran, sent }));
