import csv,os,sys,time,torch
F=torch.nn.functional.scaled_dot_product_attention
O=os.environ.get("OUT",".");d="cuda";B=torch.bfloat16
def T(f,n=30):
 for _ in range(5):f()
 torch.cuda.synchronize();e=[torch.cuda.Event(enable_timing=True) for _ in"ab"];e[0].record()
 for _ in range(n):f()
 e[1].record();torch.cuda.synchronize();return e[0].elapsed_time(e[1])/n*1e3
R=[]
for qh,kh in[(32,8),(16,2)]:
 for kv in[1024,4096,20000]:
  for b in[1,8,32,64]:
   k=torch.randn(b,kh,kv,128,device=d,dtype=B);v=torch.randn_like(k);q=torch.randn(b,qh,1,128,device=d,dtype=B)
   t=T(lambda:F(q,k,v,enable_gqa=True));tr=T(lambda:(k.sum(),v.sum()));cb=4*k.numel()
   R.append(["decode_attention",qh,kh,b,kv,"","","",t,cb/t/1e3,cb/tr/1e3,""]);del k,v;torch.cuda.empty_cache()
for n,K in[(6144,4096),(4096,4096),(28672,4096),(4096,14336),(2560,8192),(14336,8192),(8192,7168)]:
 for m in[1,8,32,64,128,256,512,1024,2048,4096,8192]:
  a=torch.randn(m,K,device=d,dtype=B);w=torch.randn(n,K,device=d,dtype=B);o=torch.ones((),device=d)
  a8,w8=a.to(torch.float8_e4m3fn),w.to(torch.float8_e4m3fn)
  for dt,f in[("bf16",lambda:a@w.t()),("fp8",lambda:torch._scaled_mm(a8,w8.t(),scale_a=o,scale_b=o,out_dtype=B))]:
   t=T(f);R.append(["gemm_"+dt,"","","","",m,n,K,t,"","",2*m*n*K/t/1e6])
with open(O+"/kernels.csv","w") as f:
 c=csv.writer(f);c.writerow("kind q_heads kv_heads batch kv_len m n k time_us cache_gb_per_s plain_read_gb_per_s tflops".split());c.writerows(R)
open(O+"/env.txt","w").write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ',time.gmtime())}\n{torch.cuda.get_device_name()}\ntorch {torch.__version__} cuda {torch.version.cuda}\n"+os.popen("nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv").read())
print(len(R))
