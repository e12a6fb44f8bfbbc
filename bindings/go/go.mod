module ampx

go 1.19
